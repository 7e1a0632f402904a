"""The records area of a RecordBatch v2: zigzag varints and one record's encoding.

Each record is ``length attributes timestampDelta offsetDelta keyLen key valueLen value
headerCount headers`` with zigzag varints; lengths of -1 mean null.  The batch codec
(kafkaesque.records.build, kafkaesque.records.batch) frames, checks and compresses these areas;
this module builds and parses the records inside them.

The CLI needs millions of records per second, so building and reading values have
table-driven or inline fast paths for the common shapes (keyless, header-less, small
records) and fall back to general code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add
from typing import cast

from kafkaesque.errors import InvalidRecord


@dataclass(slots=True)
class Record:
    """One decoded record with absolute offset and timestamp (ms)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


# --- varints -------------------------------------------------------------------


def encode_varint(n: int) -> bytes:
    """Zigzag varint/varlong encoding of a signed 64-bit integer."""
    return encode_uvarint((n << 1) ^ (n >> 63))


def encode_uvarint(v: int) -> bytes:
    """Unsigned varint (the protocol's compact lengths; zigzagged values of records)."""
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
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
_ZZ = [encode_varint(n) for n in range(_TABLE_SIZE)]
_PREFIX_AT = [b"\x00\x00" + z + b"\x01" for z in _ZZ]
_PREFIX_LEN = list(map(len, _PREFIX_AT))
_TAIL_LEN = list(map(add, map(len, _ZZ), range(1, _TABLE_SIZE + 1)))
_NULL = b"\x01"  # varint -1: null key/value
_SMALL = [(b >> 1) ^ -(b & 1) if b < 0x80 else None for b in range(256)]


def _varint(n: int) -> bytes:
    return _ZZ[n] if 0 <= n < _TABLE_SIZE else encode_varint(n)


def _bytes_field(b: bytes | None) -> bytes:
    return _NULL if b is None else _varint(len(b)) + b


# --- building --------------------------------------------------------------------


def encode_simple(values: Sequence[bytes | None]) -> bytes | None:
    """Keyless, header-less records with offset deltas 0..n-1 and timestamp delta 0,
    built with C-level maps.

    Returns None when there are too many records for the tables, or a value is None or
    too large for them.
    """
    count = len(values)
    if count > _TABLE_SIZE:
        return None
    # A None among the values makes len() raise TypeError (answered below with None):
    # past the try every value is bytes.
    present = cast(Sequence[bytes], values)
    try:
        sizes = list(map(len, present))
        lengths = list(map(add, _PREFIX_LEN[:count], map(_TAIL_LEN.__getitem__, sizes)))
        # Interleave the five pieces of every record by slice assignment.
        parts: list[bytes] = [b""] * (5 * count)
        parts[0::5] = map(_ZZ.__getitem__, lengths)
        parts[1::5] = _PREFIX_AT[:count]
        parts[2::5] = map(_ZZ.__getitem__, sizes)
    except (TypeError, IndexError):
        return None
    parts[3::5] = present
    parts[4::5] = repeat(b"\x00", count)  # header count
    return b"".join(parts)


def encode_general(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None,
    timestamps: Sequence[int] | None,
    base_ts: int,
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None,
    offset_deltas: Sequence[int] | None = None,
) -> bytes:
    """Records of any shape with offset deltas 0..n-1 (or ``offset_deltas``: a compacted
    batch keeps its records' own), timestamps relative to ``base_ts``."""
    parts: list[bytes] = []
    for i, value in enumerate(values):
        fields = [
            b"\x00",  # record attributes: unused in v2
            _varint(0 if timestamps is None else timestamps[i] - base_ts),
            _varint(i if offset_deltas is None else offset_deltas[i]),
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


# --- parsing ---------------------------------------------------------------------


def parse_record(
    data: bytes, pos: int, end: int, max_delta: int
) -> tuple[int, int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    """Parse the record at ``pos`` of a batch's records area (which ends at ``end``):
    (next position, offset delta, timestamp delta, key, value, headers). The one record
    parser: decode_batch builds Records from it, the archive builds table rows.

    Single-byte varints, by far the most common, are decoded inline through ``_SMALL``
    (None marks a multi-byte varint) to avoid a call per field.
    """
    small, read = _SMALL, read_varint
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


def parse_keys(
    data: bytes, pos: int, end: int, count: int, base_offset: int, max_delta: int
) -> list[tuple[int, bytes | None, bool]]:
    """(offset, key, whether the value is null) of the ``count`` records from ``pos``, which
    must end exactly at ``end``: what log compaction decides by. Values and headers are
    not read: each record's length says where the next one starts (the batch's CRC vouches
    for the bytes). One- and two-byte varints are decoded inline."""
    small, read = _SMALL, read_varint
    out: list[tuple[int, bytes | None, bool]] = []
    append = out.append
    for _ in repeat(None, count):
        b = data[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif data[pos + 1] < 0x80:
            u = (b & 0x7F) | (data[pos + 1] << 7)
            length, pos = (u >> 1) ^ -(u & 1), pos + 2
        else:
            length, pos = read(data, pos)
        rec_end = pos + length
        if length < 6 or rec_end > end:
            raise InvalidRecord(f"bad record length {length}")
        at = pos + 1  # past the record attributes, unused in v2
        while data[at] > 0x7F:  # the timestamp delta, not needed
            at += 1
        b = data[at + 1]
        if b < 0x80:
            delta, at = (b >> 1) ^ -(b & 1), at + 2
        elif data[at + 2] < 0x80:
            u = (b & 0x7F) | (data[at + 2] << 7)
            delta, at = (u >> 1) ^ -(u & 1), at + 3
        else:
            delta, at = read(data, at + 1)
        if not 0 <= delta <= max_delta:
            raise InvalidRecord(f"offset delta {delta} outside 0..{max_delta}")
        size = small[data[at]]
        if size is None:
            size, at = read(data, at)
        else:
            at += 1
        if size >= 0:
            key: bytes | None = data[at : at + size]
            at += size
        elif size == -1:
            key = None
        else:
            raise InvalidRecord(f"bad key length {size}")
        append((base_offset + delta, key, data[at] == 1))  # 1: varint -1, a null value
        pos = rec_end
    if pos != end:
        raise InvalidRecord(f"batch holds more or less data than its {count} records")
    return out


def parse_records(
    data: bytes, pos: int, end: int, count: int, base_offset: int, base_ts: int, max_delta: int
) -> tuple[list[Record], int]:
    """``count`` records from ``pos``; returns them and the end position."""
    records: list[Record] = []
    for _ in range(count):
        pos, delta, ts_delta, key, value, headers = parse_record(data, pos, end, max_delta)
        records.append(Record(base_offset + delta, base_ts + ts_delta, key, value, headers))
    return records, pos


def parse_values(data: bytes, pos: int, end: int, count: int, max_delta: int) -> list[bytes | None]:
    """Values of the ``count`` records from ``pos``, which must end exactly at ``end``.

    The fast path takes records whose length fits two varint bytes, with a null
    or short key, a value under 8 KiB and no headers, and skips their timestamp
    and offset deltas unvalidated (the batch's CRC vouches for the bytes); any
    other record goes through parse_record.
    """
    values: list[bytes | None] = []
    append = values.append
    try:
        for _ in repeat(None, count):
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
            pos, _, _, _, value, _ = parse_record(data, pos, end, max_delta)
            append(value)
    except (IndexError, UnicodeDecodeError) as exc:
        raise InvalidRecord(f"malformed record {len(values)}: {exc}") from exc
    if pos != end:
        raise InvalidRecord(f"batch holds more or less data than its {count} records")
    return values
