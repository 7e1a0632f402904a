"""Kafka RecordBatch v2 (magic 2): build, check and decode.

This is the only record format of the project: clients and the CLI produce
batches, Redis stores them verbatim and readers decode them.  Layout of the
61-byte header (all big-endian)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8
    crc uint32 (CRC-32C of everything after it) | attributes int16
    lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32

followed by the records (compressed as one blob when attributes say so, by
kafkaesque.compression, whose Compression this module re-exports).  Each
record is ``length attributes timestampDelta offsetDelta keyLen key valueLen
value headerCount headers`` with zigzag varints.

The CLI needs millions of records per second, so ``build_batch`` and
``decode_values`` have table-driven fast paths for the common shapes
(keyless, header-less, small records) and fall back to general code.
"""

from __future__ import annotations

import enum
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add

from crc32c import crc32c

from kafkaesque.compression import Compression, DecompressionError, compress, decompress

HEADER_SIZE = 61
MAGIC = 2
_LOG_OVERHEAD = 12  # baseOffset + batchLength: the part batchLength does not count
_CRC_START = 21  # the CRC covers attributes (offset 21) to the end of the batch
_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qiibI")  # baseOffset .. crc
_CRC_COVERED = struct.Struct(">hiqqqhii")  # attributes .. recordCount
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")


class TimestampType(enum.IntEnum):
    """Attribute bit 3: who set the record timestamps."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class InvalidRecord(ValueError):
    """A batch whose content breaks the format's rules (Kafka's INVALID_RECORD: a client
    sending the same bytes again gets the same answer)."""


class CorruptBatch(InvalidRecord):
    """A batch whose bytes were damaged: lengths or CRC do not match (Kafka's
    CORRUPT_MESSAGE, which clients retry)."""


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
        return Compression(self.attributes & 0x07)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes >> 3) & 1)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)


@dataclass(slots=True)
class Record:
    """One decoded record with absolute offset and timestamp (ms)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


# --- varints ---------------------------------------------------------------


def _encode_varint(n: int) -> bytes:
    """Zigzag varint/varlong encoding of a signed 64-bit integer."""
    v = (n << 1) ^ (n >> 63)
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Decode a zigzag varint at ``pos``; return (value, next position)."""
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    value = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = data[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos + 1
        shift += 7
        if shift > 63:
            raise InvalidRecord(f"varint longer than 10 bytes at {pos}")


# Precomputed encodings so the build fast path does no per-record arithmetic
# in Python: _ZZ[n] is the varint of n, _PREFIX_AT[i] the record bytes between
# the length and the value length for offset delta i (attributes 0, timestamp
# delta 0, offset delta i, null key) and _TAIL_LEN[n] the size of value length
# + value + header count for an n-byte value.
_TABLE_SIZE = 1 << 14
_ZZ = [_encode_varint(n) for n in range(_TABLE_SIZE)]
_PREFIX_AT = [b"\x00\x00" + z + b"\x01" for z in _ZZ]
_PREFIX_LEN = list(map(len, _PREFIX_AT))
_TAIL_LEN = list(map(add, map(len, _ZZ), range(1, _TABLE_SIZE + 1)))
_NULL = b"\x01"  # varint -1: null key/value
_SMALL = [(b >> 1) ^ -(b & 1) if b < 0x80 else None for b in range(256)]


def _varint(n: int) -> bytes:
    return _ZZ[n] if 0 <= n < _TABLE_SIZE else _encode_varint(n)


def _bytes_field(b: bytes | None) -> bytes:
    return _NULL if b is None else _varint(len(b)) + b


# --- building ----------------------------------------------------------------


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
) -> bytes:
    """Encode records into one batch with offset deltas 0..n-1.

    ``timestamp`` (ms, default now) applies to every record unless
    ``timestamps`` gives one per record.
    """
    count = len(values)
    if not count:
        raise ValueError("a batch needs at least one record")
    for name, seq in (("keys", keys), ("timestamps", timestamps), ("headers", headers)):
        if seq is not None and len(seq) != count:
            raise ValueError(f"{name} has {len(seq)} items for {count} values")
    if timestamps is not None:
        if timestamp is not None:
            raise ValueError("pass either timestamp or timestamps, not both")
        base_ts, max_ts = timestamps[0], max(timestamps)  # base = first, like the Java client
    else:
        base_ts = max_ts = int(time.time() * 1000) if timestamp is None else timestamp

    records = None
    if keys is None and headers is None and timestamps is None and count <= _TABLE_SIZE:
        records = _encode_simple(values)
    if records is None:
        records = _encode_general(values, keys, timestamps, base_ts, headers)
    if compression:
        records = compress(Compression(compression), records)

    attributes, last_delta = int(compression), count - 1
    covered = _CRC_COVERED.pack(
        attributes, last_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence, count
    )
    crc = crc32c(records, crc32c(covered))
    length = HEADER_SIZE - _LOG_OVERHEAD + len(records)
    return b"".join((_PREFIX.pack(base_offset, length, -1, MAGIC, crc), covered, records))


def _encode_simple(values: Sequence[bytes | None]) -> bytes | None:
    """Keyless, header-less records with one timestamp, built with C-level maps.

    Returns None when a value is None or too large for the tables.
    """
    count = len(values)
    try:
        sizes = list(map(len, values))
        lengths = list(map(add, _PREFIX_LEN[:count], map(_TAIL_LEN.__getitem__, sizes)))
        # Interleave the five pieces of every record by slice assignment.
        parts: list[bytes] = [b""] * (5 * count)
        parts[0::5] = map(_ZZ.__getitem__, lengths)
        parts[1::5] = _PREFIX_AT[:count]
        parts[2::5] = map(_ZZ.__getitem__, sizes)
    except (TypeError, IndexError):
        return None
    parts[3::5] = values
    parts[4::5] = repeat(b"\x00", count)  # header count
    return b"".join(parts)


def _encode_general(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None,
    timestamps: Sequence[int] | None,
    base_ts: int,
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None,
) -> bytes:
    parts = []
    for i, value in enumerate(values):
        fields = [
            b"\x00",  # record attributes: unused in v2
            _varint(0 if timestamps is None else timestamps[i] - base_ts),
            _varint(i),
            _bytes_field(None if keys is None else keys[i]),
            _bytes_field(value),
        ]
        record_headers = () if headers is None else headers[i]
        fields.append(_varint(len(record_headers)))
        for hkey, hvalue in record_headers:
            fields += (_bytes_field(hkey.encode()), _bytes_field(hvalue))
        body = b"".join(fields)
        parts += (_varint(len(body)), body)
    return b"".join(parts)


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
    if available > 16 and buf[pos + 16] != MAGIC:
        raise InvalidRecord(
            f"unsupported magic {buf[pos + 16]} (only record batch v2 is supported)"
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
    # Kafka requires lastOffsetDelta == count - 1 for batches sent by clients.
    if header.record_count < 0 or header.last_offset_delta != header.record_count - 1:
        raise InvalidRecord(
            f"record count {header.record_count} disagrees with"
            f" last offset delta {header.last_offset_delta}"
        )
    if header.attributes & 0x07 > Compression.ZSTD:
        raise InvalidRecord(f"unknown compression codec {header.attributes & 0x07}")
    crc = crc32c(memoryview(buf)[pos + _CRC_START : pos + header.length])
    if crc != header.crc:
        raise CorruptBatch(f"CRC mismatch: stored {header.crc:#010x}, computed {crc:#010x}")
    return header


def split_batches(buf: bytes | memoryview) -> list[bytes]:
    """Split concatenated batches (a produce request's records), checking each as
    `check_client_batch` does."""
    batches, pos = [], 0
    while pos < len(buf):
        header = check_client_batch(buf, pos)
        batches.append(bytes(buf[pos : pos + header.length]))
        pos += header.length
    return batches


def check_client_batch(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """`check_batch`, then what Kafka demands of a batch a client produces: at least one
    record, no control batch (only the broker writes transaction markers), and records
    that parse, with offset deltas 0, 1, ... in order. A batch the log accepts therefore
    decodes for every consumer and for the archive."""
    header, data, pos, end = records_data(buf, pos)
    if header.is_control:
        raise InvalidRecord("clients may not write control batches")
    if header.record_count < 1:
        raise InvalidRecord("a batch must hold at least one record")
    max_delta = header.last_offset_delta
    try:
        for expected in range(header.record_count):
            pos, delta, *_ = parse_record(data, pos, end, max_delta)
            if delta != expected:
                raise InvalidRecord(f"record {expected} has offset delta {delta}")
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
        return b"".join((_INT64.pack(base_offset), view[8:]))
    return b"".join((_INT64.pack(base_offset), view[8:12], _INT32.pack(leader_epoch), view[16:]))


# --- decoding ----------------------------------------------------------------


def records_data(buf: bytes | memoryview, pos: int) -> tuple[BatchHeader, bytes, int, int]:
    """Check the batch; return header, a bytes object holding its records, start and end."""
    header = check_batch(buf, pos)
    end = pos + header.length
    codec = header.attributes & 0x07
    if codec:
        try:
            data = decompress(codec, memoryview(buf)[pos + HEADER_SIZE : end])
        except DecompressionError as exc:
            raise InvalidRecord(str(exc)) from exc
        return header, data, 0, len(data)
    if not isinstance(buf, bytes):  # indexing bytes is fastest and slices must be bytes
        return header, bytes(buf[pos + HEADER_SIZE : end]), 0, header.length - HEADER_SIZE
    return header, buf, pos + HEADER_SIZE, end


def parse_record(
    data: bytes, pos: int, end: int, max_delta: int
) -> tuple[int, int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    """Parse the record at ``pos`` of a batch's records area (which ends at ``end``):
    (next position, offset delta, timestamp delta, key, value, headers). The one record
    parser: decode_batch builds Records from it, the archive builds table rows.

    Single-byte varints, by far the most common, are decoded inline through ``_SMALL``
    (None marks a multi-byte varint) to avoid a call per field.
    """
    small, read = _SMALL, _read_varint
    length = small[data[pos]]
    if length is None:
        length, pos = read(data, pos)
    else:
        pos += 1
    rec_end = pos + length
    if length < 6 or rec_end > end:  # 6 bytes is the smallest possible record
        raise InvalidRecord(f"bad record length {length}")
    ts_delta = small[data[pos + 1]]  # + 1 skips the record attributes, unused in v2
    if ts_delta is None:
        ts_delta, pos = read(data, pos + 1)
    else:
        pos += 2
    delta = small[data[pos]]
    if delta is None:
        delta, pos = read(data, pos)
    else:
        pos += 1
    if not 0 <= delta <= max_delta:
        raise InvalidRecord(f"offset delta {delta} outside 0..{max_delta}")
    key_value: list[bytes | None] = []
    for _ in (0, 1):  # the key, then the value: a length (-1: null), then the bytes
        size = small[data[pos]]
        if size is None:
            size, pos = read(data, pos)
        else:
            pos += 1
        if size >= 0:
            key_value.append(data[pos : pos + size])
            pos += size
        elif size == -1:
            key_value.append(None)
        else:
            raise InvalidRecord(f"bad key/value length {size}")
    key, value = key_value
    headers: list[tuple[str, bytes | None]] = []
    if data[pos] == 0:
        pos += 1
    else:
        header_count, pos = read(data, pos)
        if not 0 <= header_count <= rec_end - pos:  # also bounds the loop below
            raise InvalidRecord(f"bad header count {header_count}")
        for _ in range(header_count):
            size, pos = read(data, pos)
            if size < 0:
                raise InvalidRecord(f"bad header key length {size}")
            header_key = data[pos : pos + size].decode()
            size, pos = read(data, pos + size)
            if size < -1:
                raise InvalidRecord(f"bad header value length {size}")
            headers.append((header_key, None if size < 0 else data[pos : pos + size]))
            pos += max(size, 0)
    if pos != rec_end:
        raise InvalidRecord(f"record length {length} disagrees with its content")
    return pos, delta, ts_delta, key, value, headers


def _parse_records(
    data: bytes, pos: int, end: int, count: int, header: BatchHeader
) -> tuple[list[Record], int]:
    """``count`` records from ``pos``; returns them and the end position."""
    base_offset, base_ts, max_delta = (
        header.base_offset,
        header.base_timestamp,
        header.last_offset_delta,
    )
    records: list[Record] = []
    for _ in range(count):
        pos, delta, ts_delta, key, value, headers = parse_record(data, pos, end, max_delta)
        records.append(Record(base_offset + delta, base_ts + ts_delta, key, value, headers))
    return records, pos


def _decode(buf: bytes | memoryview, pos: int) -> tuple[BatchHeader, list[Record]]:
    header, data, start, end = records_data(buf, pos)
    try:
        records, start = _parse_records(data, start, end, header.record_count, header)
    except (IndexError, UnicodeDecodeError) as exc:
        raise InvalidRecord(f"malformed record: {exc}") from exc
    if start != end:
        raise InvalidRecord(f"batch holds more data than its {header.record_count} records")
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        for record in records:
            record.timestamp = header.max_timestamp
    return header, records


def decode_batch(buf: bytes | memoryview, pos: int = 0) -> list[Record]:
    """Check and decode every record of the batch at ``pos``."""
    return _decode(buf, pos)[1]


def decode_values(buf: bytes | memoryview, pos: int = 0) -> list[bytes | None]:
    """Values of the batch at ``pos``; none for control batches (transaction markers).

    The fast path takes records whose length fits two varint bytes, with a null
    or short key, a value under 8 KiB and no headers, and skips their timestamp
    and offset deltas unvalidated (the CRC vouches for the bytes); any other
    record goes through the general parser.
    """
    header, data, pos, end = records_data(buf, pos)
    if header.is_control:
        return []
    values: list[bytes | None] = []
    append = values.append
    try:
        for _ in repeat(None, header.record_count):
            b = data[pos]
            q = 0  # position of the value length, 0 = use the general parser
            if not b & 1:  # odd would be a negative length
                if b < 0x80:
                    last = pos + (b >> 1)  # last byte of the record: header count
                    q = pos + 2  # skip length and attributes
                elif data[pos + 1] < 0x80:
                    last = pos + 1 + (((b & 0x7F) | (data[pos + 1] << 7)) >> 1)
                    q = pos + 3
                if q:
                    while data[q] > 0x7F:  # timestamp delta
                        q += 1
                    q += 1
                    while data[q] > 0x7F:  # offset delta
                        q += 1
                    k = data[q + 1]  # key length
                    if k == 1:  # null key
                        q += 2
                    elif k < 0x80 and not k & 1:
                        q += 2 + (k >> 1)
                    else:
                        q = 0
            if q and not data[last]:
                # The value must run exactly up to the zero header count.
                size = last - q - 1
                if data[q] == size << 1:
                    append(data[q + 1 : last])
                    pos = last + 1
                    continue
                size -= 1
                if (
                    size < 0x2000
                    and data[q] == ((size << 1) & 0x7F) | 0x80
                    and data[q + 1] == size >> 6
                ):
                    append(data[q + 2 : last])
                    pos = last + 1
                    continue
            records, pos = _parse_records(data, pos, end, 1, header)
            append(records[0].value)
    except (IndexError, UnicodeDecodeError) as exc:
        raise InvalidRecord(f"malformed record {len(values)}: {exc}") from exc
    if pos != end:
        raise InvalidRecord(f"batch holds more or less data than its {header.record_count} records")
    return values


def iter_records(buffers: Iterable[bytes]) -> Iterator[Record]:
    """Records of every batch in ``buffers``; each buffer may hold several batches."""
    for buf in buffers:
        pos = 0
        while pos < len(buf):
            header, records = _decode(buf, pos)
            yield from records
            pos += header.length
