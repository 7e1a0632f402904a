"""Building RecordBatch v2 batches: from records, rebuilt by compaction, rewritten by the broker."""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence

from crc32c import crc32c

from kafkaesque.records.batch import (
    ATTR_COMPRESSION,
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    BATCH_LENGTH,
    HEADER_SIZE,
    MAGIC,
    BatchHeader,
    read_header,
)
from kafkaesque.records.body import Record, encode_general, encode_simple
from kafkaesque.records.compression import Compression, compress

# The header (kafkaesque.records.batch' field positions) packed in two parts around the CRC,
# which covers attributes to the end of the batch.
_PREFIX = struct.Struct(">qiibI")  # baseOffset .. crc
_CRC_COVERED = struct.Struct(">hiqqqhii")  # attributes .. recordCount
_LOG_OVERHEAD = BATCH_LENGTH.stop  # baseOffset + batchLength: the part batchLength does not count


def build_batch(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    *,
    timestamp: int | None = None,
    timestamps: Sequence[int] | None = None,
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None = None,
    compression: Compression = Compression.NONE,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    offset_deltas: Sequence[int] | None = None,
    transactional: bool = False,
) -> bytes:
    """Encode records into one batch with offset deltas 0..n-1 (or ``offset_deltas``,
    increasing: a compacted batch, whose gaps were records the compactor removed);
    ``transactional`` sets isTransactional (a transactional producer's batch).

    ``timestamp`` (ms, default now) applies to every record unless
    ``timestamps`` gives one per record.
    """
    count = len(values)
    if not count:
        raise ValueError("a batch needs at least one record")
    for name, seq in (
        ("keys", keys),
        ("timestamps", timestamps),
        ("headers", headers),
        ("offset_deltas", offset_deltas),
    ):
        if seq is not None and len(seq) != count:
            raise ValueError(f"{name} has {len(seq)} items for {count} values")
    if timestamps is not None:
        if timestamp is not None:
            raise ValueError("pass either timestamp or timestamps, not both")
        base_ts, max_ts = timestamps[0], max(timestamps)  # base = first, like the Java client
    else:
        base_ts = max_ts = int(time.time() * 1000) if timestamp is None else timestamp

    records = None
    if keys is None and headers is None and timestamps is None and offset_deltas is None:
        records = encode_simple(values)
    if records is None:
        records = encode_general(values, keys, timestamps, base_ts, headers, offset_deltas)
    if compression:
        records = compress(Compression(compression), records)
    last_delta = count - 1 if offset_deltas is None else offset_deltas[-1]
    return _assemble(
        base_offset,
        -1,
        int(compression) | (ATTR_TRANSACTIONAL if transactional else 0),
        last_delta,
        base_ts,
        max_ts,
        (producer_id, producer_epoch, base_sequence),
        count,
        records,
    )


def rebuild_batch(header: BatchHeader, records: Sequence[Record]) -> bytes:
    """The batch ``header`` heads, holding only ``records`` (some of its own, in offset
    order): what Kafka's log cleaner writes. The batch keeps its baseOffset and
    lastOffsetDelta (so it still spans its offsets and a reader's position moves past its
    end), its partitionLeaderEpoch, attributes (codec, timestamp type), producer id, epoch
    and baseSequence (a record's sequence stays baseSequence + its offset delta);
    recordCount, the timestamps, the length and the CRC are recomputed. The records are
    compressed again with the batch's codec."""
    if not records:
        raise ValueError("a batch needs at least one record")
    base = header.base_offset
    deltas = [r.offset - base for r in records]
    if header.attributes & ATTR_LOG_APPEND_TIME:
        # Every record's timestamp is the batch's maxTimestamp: keep both header times.
        base_ts, max_ts, timestamps = header.base_timestamp, header.max_timestamp, None
    else:
        timestamps = [r.timestamp for r in records]
        base_ts, max_ts = timestamps[0], max(timestamps)
    body = encode_general(
        [r.value for r in records],
        [r.key for r in records],
        timestamps,
        base_ts,
        [r.headers for r in records],
        deltas,
    )
    codec = header.attributes & ATTR_COMPRESSION
    if codec:
        body = compress(Compression(codec), body)
    return _assemble(
        base,
        header.partition_leader_epoch,
        header.attributes,
        header.last_offset_delta,
        base_ts,
        max_ts,
        (header.producer_id, header.producer_epoch, header.base_sequence),
        len(records),
        body,
    )


def _assemble(
    base_offset: int,
    leader_epoch: int,
    attributes: int,
    last_delta: int,
    base_ts: int,
    max_ts: int,
    producer: tuple[int, int, int],
    count: int,
    records: bytes,
) -> bytes:
    """A batch from its header fields and its (compressed) records area, CRC computed."""
    covered = _CRC_COVERED.pack(attributes, last_delta, base_ts, max_ts, *producer, count)
    return _frame(base_offset, leader_epoch, covered, records)


def rewrite_batch(
    batch: bytes,
    *,
    records: bytes | None = None,
    compression: Compression | None = None,
    log_append_time: int | None = None,
) -> bytes:
    """Copy of the checked ``batch`` as the broker rewrites it: with ``records`` as its
    records area, compressed with ``compression``, and/or stamped with the LogAppendTime
    ``log_append_time`` (the timestamp-type bit and maxTimestamp, as Kafka's broker stamps:
    readers then take maxTimestamp for every record, so the records and baseTimestamp stay
    as they are). Length and CRC are recomputed; every other header field is kept."""
    if (records is None) != (compression is None):
        raise ValueError("new records and their compression come together")
    h = read_header(batch)
    attributes, max_ts = h.attributes, h.max_timestamp
    body: bytes | memoryview = memoryview(batch)[HEADER_SIZE:]
    if records is not None and compression is not None:
        attributes = (attributes & ~ATTR_COMPRESSION) | compression
        body = records
    if log_append_time is not None:
        attributes |= ATTR_LOG_APPEND_TIME
        max_ts = log_append_time
    covered = _CRC_COVERED.pack(
        attributes,
        h.last_offset_delta,
        h.base_timestamp,
        max_ts,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.record_count,
    )
    return _frame(h.base_offset, h.partition_leader_epoch, covered, body)


def _frame(
    base_offset: int, leader_epoch: int, covered: bytes, records: bytes | memoryview
) -> bytes:
    """A whole batch from its CRC-covered header fields and records area."""
    crc = crc32c(records, crc32c(covered))
    length = HEADER_SIZE - _LOG_OVERHEAD + len(records)
    return b"".join((_PREFIX.pack(base_offset, length, leader_epoch, MAGIC, crc), covered, records))


# Kafka's ControlRecordType: the key of a transaction marker's one record says which.
ABORT, COMMIT = 0, 1
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_MARKER_VALUE = struct.Struct(">hi")  # EndTransactionMarker: version 0, coordinatorEpoch


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int = 0,
    timestamp: int | None = None,
) -> bytes:
    """A transaction marker as Kafka's broker writes it: a batch with isControl and
    isTransactional set, the producer's id and epoch, baseSequence -1, and one record whose
    key is the control record key (version 0, COMMIT or ABORT) and whose value is the
    EndTransactionMarker (version 0, the coordinator's epoch)."""
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    body = encode_general(
        [_MARKER_VALUE.pack(0, coordinator_epoch)],
        [_CONTROL_KEY.pack(0, COMMIT if commit else ABORT)],
        None,
        ts,
        None,
        None,
    )
    return _assemble(
        0,
        -1,
        ATTR_CONTROL | ATTR_TRANSACTIONAL,
        0,
        ts,
        ts,
        (producer_id, producer_epoch, -1),
        1,
        body,
    )
