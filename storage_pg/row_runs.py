"""Runs of records of one layout in a stored batch, read by strided slices for the
archive's rows (storage_pg/rows.py): what producers send is mostly records of one size,
no headers and consecutive offset deltas, whose values sit at the same place in every
record. A run's records are each checked as ``parse_record`` checks one (their lengths,
offset deltas, key and value lengths and header count compared byte for byte, column by
column), then their timestamp deltas, keys and values taken by slicing; a record that
differs ends the run and is parsed on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkaesque.records.body import parse_record

# Records looked at one at a time after a failed run, before the next attempt.
RETRY_AFTER = 64
# Shorter runs are not worth the layout's cost: one at a time.
MIN_RUN = 16
_HIGH = bytes(int(b > 0x7F) for b in range(256))  # translate: 1 for a continued varint byte
# The varint bytes of offset delta d at [d]: one byte (d < 64), or the two bytes (d < 8192).
_DELTA_BYTES = {
    1: (bytes(2 * d for d in range(64)),),
    2: (
        bytes((2 * d) & 0x7F | 0x80 for d in range(8192)),
        bytes((2 * d) >> 7 for d in range(8192)),
    ),
}


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a record's fields are, from its first byte, for every record of a run."""

    size: int  # bytes of a whole record
    fixed: tuple[tuple[int, int], ...]  # (offset, byte) every record holds
    ts_at: int  # the timestamp delta's varint
    ts_width: int  # 1 or 2 bytes
    delta_at: int  # the offset delta's varint
    delta_width: int  # 1 or 2 bytes
    key_at: int  # the key's bytes (key_len: -1 for a null key)
    key_len: int
    value_at: int
    value_len: int


def _width(data: bytes, at: int) -> int:
    """Bytes of the varint at ``at``: 1, 2, or 0 for a longer one."""
    if data[at] < 0x80:
        return 1
    return 2 if data[at + 1] < 0x80 else 0


def layout_at(data: bytes, pos: int, end: int, index: int, max_delta: int) -> Layout | None:
    """The layout of the record at ``pos`` (record ``index`` of its batch), if it is one a
    run can have: offset delta = ``index``, a value, no headers, a key of at most 63 bytes
    or none, varints of 1 or 2 bytes. ``parse_record`` checks it (raising what it raises
    for a bad one)."""
    next_pos, delta, _, key, value, headers = parse_record(data, pos, end, max_delta)
    if delta != index or value is None or headers:
        return None
    length_width = _width(data, pos)
    ts_at = length_width + 1  # past the attributes
    ts_width = _width(data, pos + ts_at)
    delta_at = ts_at + ts_width
    delta_width = _width(data, pos + delta_at)
    key_length_at = delta_at + delta_width
    key_byte = data[pos + key_length_at]
    if not (length_width and ts_width and delta_width) or key_byte > 0x7F:
        return None
    key_len = -1 if key is None else len(key)
    value_length_at = key_length_at + 1 + max(key_len, 0)
    value_width = _width(data, pos + value_length_at)
    value_at = value_length_at + value_width
    size = next_pos - pos
    if not value_width or value_at + len(value) != size - 1 or data[next_pos - 1] != 0:
        return None  # not the canonical encoding parse_record also accepts
    fixed = [(k, data[pos + k]) for k in range(length_width)]
    fixed.append((key_length_at, key_byte))
    fixed += [(value_length_at + k, data[pos + value_length_at + k]) for k in range(value_width)]
    fixed.append((size - 1, 0))  # no headers
    return Layout(
        size,
        tuple(fixed),
        ts_at,
        ts_width,
        delta_at,
        delta_width,
        key_length_at + 1,
        key_len,
        value_at,
        len(value),
    )


def run_length(data: bytes, pos: int, end: int, index: int, limit: int, layout: Layout) -> int:
    """How many records from ``pos`` (``index`` on, at most ``limit``) have ``layout``:
    the first (checked by ``layout_at``) and those after it whose bytes agree."""
    size = layout.size
    run = min(limit, (end - pos) // size)
    if layout.delta_width == 1:
        run = min(run, 64 - index)  # zigzag deltas of one byte: up to 63
    else:
        run = min(run, 8192 - index)  # of two bytes: up to 8191
    if run <= 1:
        return max(run, 0)
    stop = pos + run * size
    matched = run
    for offset, byte in layout.fixed:
        column = data[pos + offset : stop : size]
        matched = min(matched, len(column) - len(column.lstrip(bytes((byte,)))))
    # The timestamp delta's varint: continued bytes, then a last one, as the first's.
    for k in range(layout.ts_width):
        column = data[pos + layout.ts_at + k : stop : size].translate(_HIGH)
        continued = b"\x01" if k < layout.ts_width - 1 else b"\x00"
        matched = min(matched, len(column) - len(column.lstrip(continued)))
    # The offset deltas: index, index + 1, ... in the first's width.
    tables = _DELTA_BYTES[layout.delta_width]
    for k, table in enumerate(tables):
        expected = table[index : index + run]
        column = data[pos + layout.delta_at + k : stop : size]
        if column != expected:  # up to the first that differs
            matched = min(
                matched,
                next(i for i, (x, y) in enumerate(zip(column, expected, strict=True)) if x != y),
            )
    return max(matched, 1)


def run_fields(
    data: bytes, pos: int, count: int, layout: Layout
) -> tuple[list[int], list[bytes | None], list[bytes]]:
    """The timestamp deltas, keys and values of the ``count`` records of a run."""
    size = layout.size
    stop = pos + count * size
    starts = range(pos, stop, size)
    at = pos + layout.ts_at
    if layout.ts_width == 1:
        stamps = [(b >> 1) ^ -(b & 1) for b in data[at:stop:size]]
    else:
        stamps = [
            (u >> 1) ^ -(u & 1)
            for u in (
                lo & 0x7F | hi << 7
                for lo, hi in zip(data[at:stop:size], data[at + 1 : stop : size], strict=True)
            )
        ]
    key_at, key_len = layout.key_at, layout.key_len
    keys: list[bytes | None] = (
        [None] * count if key_len < 0 else [data[s + key_at : s + key_at + key_len] for s in starts]
    )
    value_at, value_len = layout.value_at, layout.value_len
    values = [data[s + value_at : s + value_at + value_len] for s in starts]
    return stamps, keys, values
