"""Turn lines of input into record batches and append them: the CLI's producer."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from kafkaesque.log import Log, TopicConfig
from kafkaesque.partitioner import partition_for_key
from kafkaesque.records import Compression, build_batch

READ_CHUNK = 4 << 20  # input bytes split into lines at a time
APPEND_BYTES = 8 << 20  # batch bytes per append script call: bounds how long Redis is busy


@dataclass(slots=True)
class ProduceSummary:
    records: int = 0
    bytes: int = 0  # input bytes consumed, line terminators included
    seconds: float = 0.0


def iter_line_chunks(stream: BinaryIO, chunk_size: int = READ_CHUNK):
    """Yield (lines, bytes consumed) per chunk. Only the b"\\n" terminator is removed; a
    last line without one is still a record; nothing is decoded."""
    leftover = b""
    pending: tuple[list[bytes], int] | None = None
    while True:
        data = stream.read(chunk_size)
        if not data:
            break
        # Hold each chunk back one read, so a final unterminated line joins its batch.
        if pending is not None:
            yield pending
        lines = (leftover + data).split(b"\n")
        leftover = lines.pop()
        pending = (lines, len(data))
    if pending is None:
        pending = ([], 0)
    if leftover:
        pending[0].append(leftover)
    if pending[0] or pending[1]:
        yield pending


class LineProducer:
    """Batches lines per partition and appends them: keyed records by murmur2 of the key,
    keyless ones round-robin per batch, or all to one fixed partition."""

    def __init__(
        self,
        log: Log,
        config: TopicConfig,
        *,
        batch_size: int = 1024,
        partition: int | None = None,
        key_separator: bytes | None = None,
        compression: Compression = Compression.NONE,
    ) -> None:
        self.log = log
        self.config = config
        self.batch_size = batch_size
        self.partition = partition
        self.key_separator = key_separator
        self.compression = compression
        self._next_partition = 0

    def _round_robin(self) -> int:
        p = self._next_partition
        self._next_partition = (p + 1) % self.config.partitions
        return p

    def _batches(self, lines: list[bytes]) -> dict[int, list[bytes]]:
        """Build this chunk's batches, grouped by partition."""
        size, now = self.batch_size, int(time.time() * 1000)
        out: dict[int, list[bytes]] = {}
        if self.key_separator is None:
            for i in range(0, len(lines), size):
                p = self.partition if self.partition is not None else self._round_robin()
                batch = build_batch(
                    lines[i : i + size], timestamp=now, compression=self.compression
                )
                out.setdefault(p, []).append(batch)
            return out
        # Keyed: a line without the separator is a record with a null key.
        per_partition: dict[int, tuple[list[bytes | None], list[bytes]]] = {}
        sep, n = self.key_separator, self.config.partitions
        for line in lines:
            key, found, value = line.partition(sep)
            if not found:
                key, value = None, line
            if self.partition is not None:
                p = self.partition
            elif key is None:
                p = self._round_robin()
            else:
                p = partition_for_key(key, n)
            keys, values = per_partition.setdefault(p, ([], []))
            keys.append(key)
            values.append(value)
        for p, (keys, values) in per_partition.items():
            out[p] = [
                build_batch(
                    values[i : i + size],
                    keys[i : i + size],
                    timestamp=now,
                    compression=self.compression,
                )
                for i in range(0, len(values), size)
            ]
        return out

    async def send(self, lines: list[bytes]) -> None:
        """Append the lines as records; batches of one partition keep their order."""
        for p, batches in self._batches(lines).items():
            group: list[bytes] = []
            group_bytes = 0
            for batch in batches:
                group.append(batch)
                group_bytes += len(batch)
                if group_bytes >= APPEND_BYTES:
                    await self.log.append(self.config.name, p, group)
                    group, group_bytes = [], 0
            if group:
                await self.log.append(self.config.name, p, group)

    async def produce(
        self, stream: BinaryIO, progress: Callable[[int], None] | None = None
    ) -> ProduceSummary:
        summary = ProduceSummary()
        started = time.perf_counter()
        for lines, consumed in iter_line_chunks(stream):
            if lines:
                await self.send(lines)
                summary.records += len(lines)
            summary.bytes += consumed
            if progress is not None:
                progress(consumed)
        summary.seconds = time.perf_counter() - started
        return summary
