"""A hand-written parser of Produce requests (v3 to v12), for the hot path.

A Produce of one record (librdkafka with ``linger.ms=0`` sends one per record) spent more
in kio and the checks around it (the array guard walks a flexible request first, then
the null-array check walks the entities kio built) than in anything else of its parse.
Here the body is read in one pass, checked as it is read: a length or count the bytes
left cannot hold, a null where the schema allows none, or a frame that ends early
raises ``MalformedProduce``, which parse_request turns into a closed connection as it
does for kio's failures. The records are a memoryview of the frame, not a copy.

The body keeps kio's names (``transactional_id``, ``acks``, ``timeout``, ``topic_data``);
its topics and partitions are plain tuples, (name, partitions) and (index, records).
Fixed fields are read with struct (an index past the end raises struct.error, which
parse_request reports like kio's errors), one-byte varints inline; longer ones, rarer,
with the array guard's reader. Not wire.protocol.fetch_request's cursor: a call per field costs
more than the field's read (a first version here with a helper call per length and
count, and named tuples, took 1.5 times as long).
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wire.protocol.array_guard import read_uvarint

MIN_VERSION = 3  # kio (like Kafka 4) reads no older Produce
MAX_VERSION = 12  # v13 names topics by id
FLEXIBLE_VERSION = 9
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_ACKS_TIMEOUT_COUNT = struct.Struct(">hii")  # legacy: then the topic count
_PARTITION = struct.Struct(">ii")  # legacy: index, records length
# The least bytes an element can take, so a count is checked against the bytes left
# before anything is built: a topic (name length, partition count), a partition (index,
# records length), plus each one's tagged-field count in flexible versions.
_LEGACY_TOPIC, _LEGACY_PARTITION = 2 + 4, 4 + 4
_FLEXIBLE_TOPIC, _FLEXIBLE_PARTITION = 1 + 1 + 1, 4 + 1 + 1


class MalformedProduce(ValueError):
    """Bytes that are not a Produce request of the version they claim."""


# (partition index, its records: a view of the frame, None if sent as null, which the
# handler refuses); plain tuples, built fastest, since a one-record request builds little
# else.
ProducePartition = tuple[int, memoryview | None]
ProduceTopic = tuple[str, list[ProducePartition]]  # (name, partitions)


@dataclass(slots=True)
class ProduceBody:
    """A Produce request's body, with kio's field names."""

    version: int
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[ProduceTopic]

    @property
    def timeout(self) -> datetime.timedelta:
        """As kio reads it."""
        return datetime.timedelta(milliseconds=self.timeout_ms)


def parse_produce(frame: bytes | memoryview, pos: int, version: int) -> tuple[ProduceBody, int]:
    """The Produce request body of ``version`` at ``pos`` of ``frame``, and where it ends."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise MalformedProduce(f"no parser for Produce v{version}")
    # Fixed fields past the end raise struct.error, which parse_request reports as it
    # reports kio's failures; an index past the end (a varint) raises IndexError.
    try:
        if version >= FLEXIBLE_VERSION:
            return _flexible(frame, pos, version)
        return _legacy(frame, pos, version)
    except IndexError:
        raise MalformedProduce("the frame ends inside the request") from None
    except UnicodeDecodeError as exc:
        raise MalformedProduce(f"a string that is not UTF-8: {exc}") from None


def _view_text(view: memoryview) -> str:
    """A UTF-8 slice of a frame that is a memoryview (read in pieces); a frame of bytes,
    the common one, is decoded by bytes.decode, the fastest."""
    return str(view, "utf-8")


def _short(frame: bytes | memoryview, pos: int, size: int) -> MalformedProduce:
    return MalformedProduce(f"{size} bytes wanted at {pos}, {len(frame) - pos} left")


def _too_many(frame: bytes | memoryview, pos: int, count: int, field: str) -> MalformedProduce:
    """A null array (the schema allows none), or one the bytes left cannot hold."""
    if count < 0:
        return MalformedProduce(f"{field} is null")
    return MalformedProduce(f"{field}: {count} entries with {len(frame) - pos} bytes left")


def _legacy(frame: bytes | memoryview, pos: int, version: int) -> tuple[ProduceBody, int]:
    view, size_of = memoryview(frame), len(frame)
    text: Callable[[Any], str] = bytes.decode if type(frame) is bytes else _view_text
    (size,) = _I16.unpack_from(frame, pos)
    pos += 2
    txn_id = None
    if size != -1:  # null; another negative length is refused, as kio refused it
        if size < 0 or pos + size > size_of:
            raise _short(frame, pos, size)
        txn_id = text(frame[pos : pos + size])
        pos += size
    acks, timeout, count = _ACKS_TIMEOUT_COUNT.unpack_from(frame, pos)
    pos += 10
    if count < 0 or count * _LEGACY_TOPIC > size_of - pos:
        raise _too_many(frame, pos, count, "topic_data")
    topics = []
    for _ in range(count):
        (size,) = _I16.unpack_from(frame, pos)
        pos += 2
        if size < 0 or pos + size > size_of:
            raise MalformedProduce("a topic name is null") if size < 0 else _short(frame, pos, size)
        name = text(frame[pos : pos + size])
        (count,) = _I32.unpack_from(frame, pos + size)
        pos += size + 4
        if count < 0 or count * _LEGACY_PARTITION > size_of - pos:
            raise _too_many(frame, pos, count, "partition_data")
        partitions: list[ProducePartition] = []
        for _ in range(count):
            index, size = _PARTITION.unpack_from(frame, pos)
            pos += 8
            if size == -1:
                partitions.append((index, None))
            elif size < 0 or pos + size > size_of:
                raise _short(frame, pos, size)
            else:
                partitions.append((index, view[pos : pos + size]))
                pos += size
        topics.append((name, partitions))
    return ProduceBody(version, txn_id, acks, timeout, topics), pos


def _flexible(frame: bytes | memoryview, pos: int, version: int) -> tuple[ProduceBody, int]:
    # Lengths are varints (stored as N + 1, 0 for null) of one byte, but for the records'
    # and long names': the common case is read inline, the rest by array_guard's reader.
    view, size_of = memoryview(frame), len(frame)
    text: Callable[[Any], str] = bytes.decode if type(frame) is bytes else _view_text
    size = frame[pos]
    if size < 0x80:
        pos += 1
    else:
        size, pos = read_uvarint(frame, pos)
    txn_id = None
    if size:
        size -= 1
        if pos + size > size_of:
            raise _short(frame, pos, size)
        txn_id = text(frame[pos : pos + size])
        pos += size
    acks, timeout = _ACKS_TIMEOUT.unpack_from(frame, pos)
    pos += 6
    count, pos = _compact(frame, pos)
    if count < 0 or count * _FLEXIBLE_TOPIC > size_of - pos:
        raise _too_many(frame, pos, count, "topic_data")
    topics = []
    for _ in range(count):
        size, pos = _compact(frame, pos)
        if size < 0 or pos + size > size_of:
            raise MalformedProduce("a topic name is null") if size < 0 else _short(frame, pos, size)
        name = text(frame[pos : pos + size])
        pos += size
        count, pos = _compact(frame, pos)
        if count < 0 or count * _FLEXIBLE_PARTITION > size_of - pos:
            raise _too_many(frame, pos, count, "partition_data")
        partitions: list[ProducePartition] = []
        for _ in range(count):
            (index,) = _I32.unpack_from(frame, pos)
            size = frame[pos + 4]
            if size < 0x80:
                pos += 5
            elif frame[pos + 5] < 0x80:  # records of 127 to 16,382 bytes
                size = (size & 0x7F) | frame[pos + 5] << 7
                pos += 6
            else:
                size, pos = read_uvarint(frame, pos + 4)
            if not size:
                partitions.append((index, None))
            elif pos + size - 1 > size_of:
                raise _short(frame, pos, size - 1)
            else:
                partitions.append((index, view[pos : pos + size - 1]))
                pos += size - 1
            pos = pos + 1 if frame[pos] == 0 else _skip_tagged(frame, pos)
        topics.append((name, partitions))
        pos = pos + 1 if frame[pos] == 0 else _skip_tagged(frame, pos)
    pos = pos + 1 if frame[pos] == 0 else _skip_tagged(frame, pos)
    return ProduceBody(version, txn_id, acks, timeout, topics), pos


def _compact(frame: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A compact length or count (a varint of N + 1; -1 for null) and where it ends; one
    byte, the common case, without the general reader."""
    n = frame[pos] - 1
    if n < 0x7F:
        return n, pos + 1
    n, pos = read_uvarint(frame, pos)
    return n - 1, pos


def _skip_tagged(frame: bytes | memoryview, pos: int) -> int:
    """Past a tagged-field section: Produce has no tagged fields, so any is skipped, as
    Kafka skips a tag it does not know."""
    count, pos = read_uvarint(frame, pos)
    for _ in range(count):
        _, pos = read_uvarint(frame, pos)  # the tag
        size, pos = read_uvarint(frame, pos)
        if pos + size > len(frame):
            raise _short(frame, pos, size)
        pos += size
    return pos
