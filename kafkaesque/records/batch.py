"""Kafka RecordBatch v2 (magic 2): header fields, check and decode.

This is the only record format of the project: clients and the CLI produce
batches, Redis stores them verbatim (or as the broker rewrote them for a topic's
configs: kafkaesque.records.build.rewrite_batch) and readers decode them.  Batches are
built by kafkaesque.records.build.  Layout of the 61-byte header (all big-endian)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8
    crc uint32 (CRC-32C of everything after it) | attributes int16
    lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32

followed by the records (compressed as one blob when attributes say so).  The
records are built and parsed by kafkaesque.records.body and compressed by
kafkaesque.records.compression; their names that callers import from here (Compression,
InvalidRecord, Record, parse_record) stay importable from here.

The field positions below are the one place the header layout is spelt out in
Python; ``base_offset``, ``next_offset``, ``offset_count`` and ``producer_fields``
read single fields of a stored batch without decoding its header.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from crc32c import crc32c

from kafkaesque.errors import CorruptBatch, InvalidRecord
from kafkaesque.records.body import (
    Record,
    parse_keys,
    parse_record,
    parse_records,
    parse_values,
)
from kafkaesque.records.check import check_plain_records
from kafkaesque.records.compression import Compression, DecompressionError, decompress

# Byte positions of the header fields, for ``batch[FIELD]`` and the accessors below.
# They tile the header in the order of _HEADER's format; tests check the two agree.
BASE_OFFSET = slice(0, 8)
BATCH_LENGTH = slice(8, 12)
PARTITION_LEADER_EPOCH = slice(12, 16)
MAGIC_FIELD = slice(16, 17)  # MAGIC is the value it must hold
CRC = slice(17, 21)
ATTRIBUTES = slice(21, 23)
LAST_OFFSET_DELTA = slice(23, 27)
BASE_TIMESTAMP = slice(27, 35)
MAX_TIMESTAMP = slice(35, 43)
PRODUCER_ID = slice(43, 51)
PRODUCER_EPOCH = slice(51, 53)
BASE_SEQUENCE = slice(53, 57)
RECORD_COUNT = slice(57, 61)

HEADER_SIZE = RECORD_COUNT.stop
MAGIC = 2
# The most a client's batch may hold decompressed. Checking a produced batch decompresses
# it whole, and a few kilobytes of gzip or zstd can expand a thousandfold or more.
MAX_CLIENT_RECORDS_BYTES = 64 << 20
# The attributes' bits.
ATTR_COMPRESSION = 0x07  # a Compression id
ATTR_LOG_APPEND_TIME = 0x08  # TimestampType.LOG_APPEND_TIME: maxTimestamp is every record's
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20  # a transaction marker, written by the broker only

_LOG_OVERHEAD = BATCH_LENGTH.stop  # baseOffset + batchLength: the part batchLength does not count
_MAGIC_AT = MAGIC_FIELD.start
_CRC_START = ATTRIBUTES.start  # the CRC covers attributes to the end of the batch
_HEADER = struct.Struct(">qiibIhiqqqhii")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
# One unpack_from per accessor (several times faster than slicing + int.from_bytes).
_BASE_OFFSET_AT = BASE_OFFSET.start
_LAST_OFFSET_DELTA_AT = LAST_OFFSET_DELTA.start
_RECORD_COUNT_AT = RECORD_COUNT.start
_PRODUCER_AT = PRODUCER_ID.start  # producerId, producerEpoch, baseSequence are adjacent
_PRODUCER = struct.Struct(">qhi")
_OFFSETS = struct.Struct(f">q{LAST_OFFSET_DELTA.start - BASE_OFFSET.stop}xi")


class TimestampType(enum.IntEnum):
    """Attribute bit 3: who set the record timestamps."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(slots=True, frozen=True)
class BatchHeader:
    """The fixed 61-byte batch header; ``length`` includes the 12-byte prefix."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & ATTR_COMPRESSION)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & ATTR_LOG_APPEND_TIME:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


# --- single fields of a stored batch ---------------------------------------------
# For hot paths that need one or two fields of a batch already checked (the log's
# append, the consumer's position): no validation, struct.error on a short buffer.


def base_offset(batch: bytes | memoryview) -> int:
    """baseOffset: the offset of the batch's first record."""
    return _INT64.unpack_from(batch, _BASE_OFFSET_AT)[0]


def offset_count(batch: bytes | memoryview) -> int:
    """How many offsets the batch spans: lastOffsetDelta + 1."""
    return _INT32.unpack_from(batch, _LAST_OFFSET_DELTA_AT)[0] + 1


def record_count(batch: bytes | memoryview) -> int:
    """recordCount: fewer than ``offset_count`` in a batch the compactor rewrote."""
    return _INT32.unpack_from(batch, _RECORD_COUNT_AT)[0]


def next_offset(batch: bytes | memoryview) -> int:
    """The offset after the batch's last: baseOffset + lastOffsetDelta + 1."""
    base, last_delta = _OFFSETS.unpack_from(batch)
    return base + last_delta + 1


def producer_fields(batch: bytes | memoryview) -> tuple[int, int, int]:
    """(producerId, producerEpoch, baseSequence); -1s for a non-idempotent producer."""
    return _PRODUCER.unpack_from(batch, _PRODUCER_AT)


# --- checking ----------------------------------------------------------------


def read_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header at ``pos`` without validating it (no CRC check)."""
    if len(buf) - pos < HEADER_SIZE or pos < 0:
        raise CorruptBatch(
            f"truncated batch header: {max(len(buf) - pos, 0)} of {HEADER_SIZE} bytes"
        )
    fields = _HEADER.unpack_from(buf, pos)
    return BatchHeader(fields[0], fields[1] + _LOG_OVERHEAD, *fields[2:])


def check_batch(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Validate the batch at ``pos`` (magic, lengths, counts, CRC-32C); return its header."""
    available = len(buf) - pos
    if available > _MAGIC_AT and buf[pos + _MAGIC_AT] != MAGIC:
        raise InvalidRecord(
            f"unsupported magic {buf[pos + _MAGIC_AT]} (only record batch v2 is supported)"
        )
    header = read_header(buf, pos)
    if header.length < HEADER_SIZE:
        raise CorruptBatch(
            f"batch length {header.length - _LOG_OVERHEAD} is shorter than the header"
        )
    if header.length > available:
        raise CorruptBatch(
            f"truncated batch: {header.length} bytes declared, {available} available"
        )
    # A compacted batch holds fewer records than the offsets it spans, never more
    # (check_client_batch demands lastOffsetDelta == count - 1 of what clients send).
    if not 0 <= header.record_count <= header.last_offset_delta + 1:
        raise InvalidRecord(
            f"record count {header.record_count} disagrees with"
            f" last offset delta {header.last_offset_delta}"
        )
    if header.attributes & ATTR_COMPRESSION > Compression.ZSTD:
        raise InvalidRecord(f"unknown compression codec {header.attributes & ATTR_COMPRESSION}")
    crc = crc32c(memoryview(buf)[pos + _CRC_START : pos + header.length])
    if crc != header.crc:
        raise CorruptBatch(f"CRC mismatch: stored {header.crc:#010x}, computed {crc:#010x}")
    return header


def split_batches(buf: bytes | memoryview) -> list[bytes]:
    """Split concatenated batches (a produce request's records), checking each as
    `check_client_batch` does."""
    batches, pos, size = [], 0, len(buf)
    while pos < size:
        length = _declared_length(buf, pos)
        if HEADER_SIZE <= length <= size - pos:
            # The batch copied once, then checked in the copy: records_data would copy a
            # view's records area to check them, and the batch was copied again to keep.
            # The copy holds the same bytes, so the checks say the same of it.
            batch = bytes(buf[pos : pos + length])
            check_client_batch(batch)
        else:  # a length the checks refuse (truncated, too short): said of ``buf``
            length = check_client_batch(buf, pos).length
            batch = bytes(buf[pos : pos + length])
        batches.append(batch)
        pos += length
    return batches


def _declared_length(buf: bytes | memoryview, pos: int) -> int:
    """The batch length its header declares, the 12-byte prefix included; -1 if the
    buffer ends before the field."""
    if len(buf) - pos < _LOG_OVERHEAD:
        return -1
    return _INT32.unpack_from(buf, pos + BATCH_LENGTH.start)[0] + _LOG_OVERHEAD


def check_client_batch(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """`check_batch`, then what Kafka demands of a batch a client produces: at least one
    record, no control batch (only the broker writes transaction markers), and records
    that parse, with offset deltas 0, 1, ... in order, within MAX_CLIENT_RECORDS_BYTES
    decompressed. A batch the log accepts therefore decodes for every consumer and for
    the archive."""
    header, data, pos, end = records_data(buf, pos, MAX_CLIENT_RECORDS_BYTES)
    if header.is_control:
        raise InvalidRecord("clients may not write control batches")
    if header.record_count < 1:
        raise InvalidRecord("a batch must hold at least one record")
    if header.last_offset_delta != header.record_count - 1:
        raise InvalidRecord(
            f"record count {header.record_count} disagrees with"
            f" last offset delta {header.last_offset_delta}"
        )
    max_delta = header.last_offset_delta
    count = header.record_count
    try:
        # The common shapes without an object per record; parse_record the others (one at
        # a time, then the fast check again), saying what is wrong with a bad one.
        expected, pos = check_plain_records(data, pos, end, count)
        while expected < count:
            pos, delta, *_ = parse_record(data, pos, end, max_delta)
            if delta != expected:
                raise InvalidRecord(f"record {expected} has offset delta {delta}")
            expected, pos = check_plain_records(data, pos, end, count, expected + 1)
    except (IndexError, UnicodeDecodeError) as exc:
        raise InvalidRecord(f"malformed record: {exc}") from exc
    if pos != end:
        raise InvalidRecord(f"batch holds more data than its {header.record_count} records")
    return header


def with_base_offset(buf: bytes, base_offset: int, leader_epoch: int | None = None) -> bytes:
    """Copy of ``buf`` with baseOffset (and partitionLeaderEpoch) replaced.

    Both fields precede the CRC-covered range, so the CRC stays valid.
    """
    if len(buf) < HEADER_SIZE:
        raise InvalidRecord(f"truncated batch header: {len(buf)} of {HEADER_SIZE} bytes")
    view = memoryview(buf)
    if leader_epoch is None:
        return b"".join((_INT64.pack(base_offset), view[BASE_OFFSET.stop :]))
    return b"".join((placed_prefix(buf, base_offset, leader_epoch), view[PLACED_PREFIX:]))


# The bytes ``placed_prefix`` stands for: baseOffset, batchLength, partitionLeaderEpoch.
PLACED_PREFIX = PARTITION_LEADER_EPOCH.stop
_PREFIX = struct.Struct(">qii")


def placed_prefix(buf: bytes | memoryview, base_offset: int, leader_epoch: int) -> bytes:
    """The first PLACED_PREFIX bytes of ``with_base_offset(buf, base_offset,
    leader_epoch)``, for a caller that sends them before the rest of ``buf`` instead of
    copying the batch (kafkaesque.hot.log_appends)."""
    if len(buf) < HEADER_SIZE:
        raise InvalidRecord(f"truncated batch header: {len(buf)} of {HEADER_SIZE} bytes")
    length = _INT32.unpack_from(buf, BATCH_LENGTH.start)[0]
    return _PREFIX.pack(base_offset, length, leader_epoch)


# --- decoding ----------------------------------------------------------------


def records_data(
    buf: bytes | memoryview, pos: int, limit: int | None = None
) -> tuple[BatchHeader, bytes, int, int]:
    """Check the batch; return header, a bytes object holding its records, start and end.
    ``limit``: compressed records that decompress to more bytes are an InvalidRecord."""
    header = check_batch(buf, pos)
    end = pos + header.length
    codec = header.attributes & ATTR_COMPRESSION
    if codec:
        try:
            data = decompress(codec, memoryview(buf)[pos + HEADER_SIZE : end], limit)
        except DecompressionError as exc:
            raise InvalidRecord(str(exc)) from exc
        return header, data, 0, len(data)
    if not isinstance(buf, bytes):  # indexing bytes is fastest and slices must be bytes
        return header, bytes(buf[pos + HEADER_SIZE : end]), 0, header.length - HEADER_SIZE
    return header, buf, pos + HEADER_SIZE, end


def _decode(buf: bytes | memoryview, pos: int) -> tuple[BatchHeader, list[Record]]:
    header, data, start, end = records_data(buf, pos)
    return header, decode_records(header, data, start, end)


def decode_records(header: BatchHeader, data: bytes, start: int, end: int) -> list[Record]:
    """The records of a batch from what ``records_data`` returned for it."""
    try:
        records, start = parse_records(
            data,
            start,
            end,
            header.record_count,
            header.base_offset,
            header.base_timestamp,
            header.last_offset_delta,
        )
    except (IndexError, UnicodeDecodeError) as exc:
        raise InvalidRecord(f"malformed record: {exc}") from exc
    if start != end:
        raise InvalidRecord(f"batch holds more data than its {header.record_count} records")
    if header.attributes & ATTR_LOG_APPEND_TIME:
        for record in records:
            record.timestamp = header.max_timestamp
    return records


def decode_batch(buf: bytes | memoryview, pos: int = 0) -> list[Record]:
    """Check and decode every record of the batch at ``pos``."""
    return _decode(buf, pos)[1]


def record_keys(
    buf: bytes | memoryview,
) -> tuple[BatchHeader, list[tuple[int, bytes | None, bool]]]:
    """Check the batch; return its header and per record (offset, key, whether its value
    is null), without decoding values or headers: what log compaction decides by."""
    header, data, pos, end = records_data(buf, 0)
    try:
        keys = parse_keys(
            data, pos, end, header.record_count, header.base_offset, header.last_offset_delta
        )
    except IndexError as exc:
        raise InvalidRecord(f"malformed record: {exc}") from exc
    return header, keys


def decode_batch_and_header(
    buf: bytes | memoryview, pos: int = 0
) -> tuple[BatchHeader, list[Record]]:
    """Check and decode the batch at ``pos``: its header and every record."""
    return _decode(buf, pos)


def decode_values(buf: bytes | memoryview, pos: int = 0) -> list[bytes | None]:
    """Values of the batch at ``pos``; none for control batches (transaction markers)."""
    header, data, pos, end = records_data(buf, pos)
    if header.attributes & ATTR_CONTROL:
        return []
    return parse_values(data, pos, end, header.record_count, header.last_offset_delta)


def iter_records(buffers: Iterable[bytes]) -> Iterator[Record]:
    """Records of every batch in ``buffers``; each buffer may hold several batches."""
    for buf in buffers:
        pos = 0
        while pos < len(buf):
            header, records = _decode(buf, pos)
            yield from records
            pos += header.length


# --- transactions ---------------------------------------------------------------

_ATTRIBUTES_AT = ATTRIBUTES.start
_INT16 = struct.Struct(">h")


def attributes(batch: bytes | memoryview) -> int:
    """The batch's attributes (codec, timestamp type, isTransactional, isControl)."""
    return _INT16.unpack_from(batch, _ATTRIBUTES_AT)[0]


def is_control(batch: bytes | memoryview) -> bool:
    """A transaction marker (control batch): no user records."""
    return bool(attributes(batch) & ATTR_CONTROL)


def is_aborted(batch: bytes | memoryview, aborted: Iterable[tuple[int, int, int]]) -> bool:
    """Whether the batch belongs to one of the ``aborted`` transactions (producer id,
    first offset, the ABORT marker's offset): a transactional batch of that producer
    between the two. What a read_committed consumer skips."""
    if not attributes(batch) & ATTR_TRANSACTIONAL:
        return False
    pid = producer_fields(batch)[0]
    base = base_offset(batch)
    return any(p == pid and first <= base < last for p, first, last in aborted)


def control_type(batch: bytes | memoryview) -> int:
    """The ControlRecordType of a control batch: 0 ABORT, 1 COMMIT."""
    [record] = decode_batch(batch)
    if record.key is None or len(record.key) < 4:
        raise InvalidRecord("a control record needs a 4-byte key")
    return _INT16.unpack_from(record.key, 2)[0]
