"""Reading a partition back through Log.read, for tests of what the log holds."""

from __future__ import annotations

from kafkaesque.hot.log import Log
from kafkaesque.records.batch import check_batch, decode_batch

Row = tuple[int, bytes | None, bytes | None]


async def read_rows(log: Log, topic: str, offset: int = 0, max_bytes: int = 200) -> list[Row]:
    """(offset, key, value) of every record of partition 0 from ``offset`` on, a few batches
    per read (through the archive where Redis no longer has them); every batch must be
    valid (CRC, lengths)."""
    out: list[Row] = []
    while True:
        result = await log.read(topic, 0, offset, max_bytes=max_bytes)
        assert not result.below_start and not result.past_end
        if not result.batches:
            return out
        for batch in result.batches:
            header = check_batch(batch)
            out += [(r.offset, r.key, r.value) for r in decode_batch(batch) if r.offset >= offset]
            offset = max(offset, header.base_offset + header.last_offset_delta + 1)
