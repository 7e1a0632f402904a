"""A guard in front of kio's native parser for flexible requests.

kio reserves memory for a compact array from its length before reading a single element,
so a frame claiming an array of billions of elements made the parser ask for hundreds of
gigabytes and the whole broker abort (Rust cannot fail an allocation softly). Legacy arrays
and strings are checked against the bytes left by kio itself. Here a flexible request is
walked once, field by field, and an array longer than the bytes left in the frame (every
element takes at least one byte) is refused before kio sees it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

# Bytes of the fixed-size Kafka types.
_FIXED = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
Skip = Callable[[bytes | memoryview, int], int]


class ArrayTooLong(ValueError):
    """A length in the frame that the bytes left cannot hold."""


def check_flexible(cls: type, frame: bytes | memoryview, pos: int) -> None:
    """Walk a flexible entity from ``pos``; raises ArrayTooLong (or ValueError for a frame
    that ends early) instead of letting kio reserve memory for an impossible array."""
    _entity(cls)(frame, pos)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes at ``pos`` and where it ends."""
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("frame ends inside a varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ArrayTooLong("varint longer than 5 bytes")


def _length(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A compact length (stored as N + 1; 0 is null, returned as 0 items)."""
    value, pos = read_uvarint(buf, pos)
    count = max(value - 1, 0)
    if count > len(buf) - pos:
        raise ArrayTooLong(f"a length of {count} with {len(buf) - pos} bytes left")
    return count, pos


def _compact_bytes(buf: bytes | memoryview, pos: int) -> int:
    size, pos = _length(buf, pos)
    return pos + size


def _fixed(size: int) -> Skip:
    return lambda buf, pos: pos + size


@cache
def _entity(cls: type) -> Skip:
    """Skip one flexible entity: its fields in order, then its tagged fields."""
    skips: list[Skip] = []
    tagged: dict[int, Skip] = {}
    for field in dataclasses.fields(cls):
        skip = _field(field)
        tag = get_field_tag(field)
        if tag is None:
            skips.append(skip)
        else:
            tagged[tag] = skip

    def skip_entity(buf: bytes | memoryview, pos: int) -> int:
        for skip in skips:
            pos = skip(buf, pos)
        count, pos = read_uvarint(buf, pos)
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            end = pos + size
            if end > len(buf):
                raise ArrayTooLong(f"a tagged field of {size} bytes past the frame's end")
            known = tagged.get(tag)
            if known is not None:
                known(buf[:end], pos)  # its arrays are checked within its own bytes
            pos = end
        return pos

    return skip_entity


def _field(field: dataclasses.Field) -> Skip:
    kind = classify_field(field)
    if isinstance(kind, EntityTupleField | PrimitiveTupleField):
        element = _entity(kind.type_) if isinstance(kind, EntityTupleField) else _value(field)

        def skip_array(buf: bytes | memoryview, pos: int) -> int:
            count, pos = _length(buf, pos)
            for _ in range(count):
                pos = element(buf, pos)
            return pos

        return skip_array
    if isinstance(kind, EntityField):
        inner = _entity(kind.type_)
        if not is_optional(field):
            return inner

        def skip_nullable(buf: bytes | memoryview, pos: int) -> int:
            if pos >= len(buf):
                raise ValueError("frame ends before a struct")
            return pos + 1 if buf[pos] == 0xFF else inner(buf, pos + 1)

        return skip_nullable
    return _value(field)


def _value(field: dataclasses.Field) -> Skip:
    kafka_type: Any = field.metadata.get("kafka_type")
    if kafka_type in _FIXED:
        return _fixed(_FIXED[kafka_type])
    if kafka_type in ("string", "bytes", "records"):
        return _compact_bytes
    raise ValueError(f"no rule for the Kafka type {kafka_type!r} of {field.name}")
