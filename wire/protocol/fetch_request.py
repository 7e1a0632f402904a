"""A hand-written parser of Fetch requests (v4 to v17), for the hot path.

kio builds an entity per partition: 42 ms for the 10,000-partition Fetch that librdkafka
sends (it uses no fetch sessions, so every request names every partition). Here a run of
partition entries is unpacked with one ``struct.iter_unpack`` into plain tuples, as they
are on the wire (``FetchTopic.entries``, read through ``Layout``); a flexible entry is of
fixed size when it has no tagged fields, the common case, and the rare entry with some
sends its topic down a general, slower path. Lengths are checked against the bytes left
before anything is built from them; a malformed frame raises ``MalformedFetch``.

Fields keep their Kafka meaning and kio's names (``max_wait`` a timedelta, topic ids as
``uuid.UUID`` with the zero id read as None, as kio reads it).
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

FLEXIBLE_VERSION = 12
TOPIC_IDS_VERSION = 13
REPLICA_STATE_VERSION = 15  # replica_id moves into the tagged replica_state
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MAX_WAIT = struct.Struct(">iii")  # max_wait, min_bytes, max_bytes
_SESSION = struct.Struct(">ii")  # session_id, session_epoch (v7+)
_REPLICA_STATE = struct.Struct(">iq")  # replica_id, replica_epoch


class MalformedFetch(ValueError):
    """Bytes that are not a Fetch request of the version they claim."""


class FetchPartition(NamedTuple):
    """One partition of a Fetch request, every field present (-1 where the version has
    none), as kio names them."""

    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int
    replica_directory_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a version's partition entry keeps each field: the struct of an entry as it is
    on the wire and ``at``, in ``FetchPartition``'s field order (the directory id aside,
    never in the fixed-size entry), each field's position in the unpacked tuple (-1: not in
    this version, read as -1). A plain tuple: unpacked per partition, on the hot path."""

    entry: struct.Struct
    at: tuple[int, int, int, int, int, int]

    @property
    def partition(self) -> int:
        """Where the partition index is."""
        return self.at[0]

    def normal(self, raw: tuple[int, ...]) -> FetchPartition:
        partition, epoch, offset, last_epoch, log_start, max_bytes = self.at
        return FetchPartition(
            raw[partition],
            -1 if epoch < 0 else raw[epoch],
            raw[offset],
            -1 if last_epoch < 0 else raw[last_epoch],
            -1 if log_start < 0 else raw[log_start],
            raw[max_bytes],
        )


def layout(version: int) -> Layout:
    if version >= FLEXIBLE_VERSION:  # the last byte: the count of tagged fields, 0
        return Layout(struct.Struct(">iiqiqiB"), (0, 1, 2, 3, 4, 5))
    if version >= 9:
        return Layout(struct.Struct(">iiqqi"), (0, 1, 2, -1, 3, 4))
    if version >= 5:
        return Layout(struct.Struct(">iqqi"), (0, -1, 1, -1, 2, 3))
    return Layout(struct.Struct(">iqi"), (0, -1, 1, -1, -1, 2))


LAYOUTS = {v: layout(v) for v in range(4, 18)}


@dataclass(slots=True)
class FetchTopic:
    """A requested topic: its name (v4-v12) or id (v13+, None for the zero id) and its
    partitions' entries as unpacked from the wire (see ``Layout``)."""

    topic: str | None
    topic_id: uuid.UUID | None
    # None until first asked for (``entries``), when ``block`` holds them: a connection
    # that sent the same entries before compares the bytes instead (wire/fetch/memo.py).
    unpacked: list[tuple[int, ...]] | None
    layout: Layout
    # partition index -> replica_directory_id, for the entries that carry one (v17).
    directory_ids: dict[int, uuid.UUID] = field(default_factory=dict)
    # The entries as on the wire when all are of the layout's fixed size, else None.
    block: bytes | None = None

    @property
    def entries(self) -> list[tuple[int, ...]]:
        """The partitions' entries, as unpacked from the wire."""
        if self.unpacked is None:
            self.unpacked = list(struct.iter_unpack(self.layout.entry.format, self.block or b""))
        return self.unpacked

    @property
    def count(self) -> int:
        """How many partition entries the topic has (counted without unpacking them)."""
        if self.unpacked is None and self.block is not None:
            return len(self.block) // self.layout.entry.size
        return len(self.entries)

    @property
    def partitions(self) -> list[FetchPartition]:
        normal = self.layout.normal
        found = [normal(raw) for raw in self.entries]
        if self.directory_ids:
            found = [
                p._replace(replica_directory_id=self.directory_ids.get(p.partition)) for p in found
            ]
        return found


@dataclass(slots=True)
class ForgottenTopic:
    topic: str | None
    topic_id: uuid.UUID | None
    partitions: list[int]


@dataclass(slots=True)
class ReplicaState:
    replica_id: int = -1
    replica_epoch: int = -1


@dataclass(slots=True)
class FetchBody:
    """A Fetch request's body, with kio's field names."""

    version: int
    replica_id: int  # v4-v14; from v15 replica_state.replica_id
    max_wait: datetime.timedelta
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[FetchTopic]
    forgotten_topics_data: list[ForgottenTopic]
    rack_id: str
    cluster_id: str | None = None
    replica_state: ReplicaState = field(default_factory=ReplicaState)


class _Reader:
    """A cursor over the frame; every read checks the bytes left."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes, pos: int, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def take(self, n: int) -> int:
        """The position of the next ``n`` bytes, which are skipped."""
        at = self.pos
        if n < 0 or at + n > self.end:
            raise MalformedFetch(f"{n} bytes wanted at {at}, {self.end - at} left")
        self.pos = at + n
        return at

    def unpack(self, s: struct.Struct) -> tuple[Any, ...]:
        return s.unpack_from(self.buf, self.take(s.size))

    def i8(self) -> int:
        return _I8.unpack_from(self.buf, self.take(1))[0]

    def i32(self) -> int:
        return _I32.unpack_from(self.buf, self.take(4))[0]

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.buf[self.take(1)]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise MalformedFetch("a varint longer than 5 bytes")

    def count(self, flexible: bool, element_size: int) -> int:
        """An array's length; refused if null or longer than the bytes left could hold
        (each element takes at least ``element_size`` bytes)."""
        n = self.uvarint() - 1 if flexible else self.i32()
        if n < 0:
            raise MalformedFetch("a null array where the schema allows none")
        if n * element_size > self.end - self.pos:
            raise MalformedFetch(f"an array of {n} with {self.end - self.pos} bytes left")
        return n

    def string(self, flexible: bool, nullable: bool = False) -> str | None:
        n = self.uvarint() - 1 if flexible else _I16.unpack_from(self.buf, self.take(2))[0]
        if n < 0:
            if nullable:
                return None
            raise MalformedFetch("a null string where the schema allows none")
        at = self.take(n)
        try:
            return self.buf[at : at + n].decode()
        except UnicodeDecodeError as exc:
            raise MalformedFetch(f"a string that is not UTF-8: {exc}") from exc

    def uuid(self) -> uuid.UUID | None:
        at = self.take(16)
        raw = self.buf[at : at + 16]
        return None if raw == _ZERO_UUID else uuid.UUID(bytes=raw)

    def tagged(self, known: dict[int, Callable[[_Reader], None]] | None = None) -> None:
        """Skip a tagged-field section, reading the fields in ``known`` (tag -> reader
        over the field's own bytes); an unknown tag is skipped, as Kafka does."""
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            at = self.take(size)
            read = known.get(tag) if known else None
            if read is not None:
                inner = _Reader(self.buf, at, at + size)
                read(inner)
                if inner.pos != at + size:
                    raise MalformedFetch(f"tagged field {tag}: {at + size - inner.pos} bytes left")


_ZERO_UUID = bytes(16)


def parse_fetch(buf: bytes, pos: int, version: int) -> tuple[FetchBody, int]:
    """The Fetch request body of ``version`` at ``pos`` of ``buf``, and where it ends."""
    if not 4 <= version <= 17:
        raise MalformedFetch(f"no parser for Fetch v{version}")
    r = _Reader(buf, pos)
    flexible = version >= FLEXIBLE_VERSION
    replica_id = r.i32() if version < REPLICA_STATE_VERSION else -1
    max_wait, min_bytes, max_bytes = r.unpack(_MAX_WAIT)
    isolation = r.i8()
    session_id, session_epoch = r.unpack(_SESSION) if version >= 7 else (0, -1)
    lay = LAYOUTS[version]
    topics = [_topic(r, version, flexible, lay) for _ in range(r.count(flexible, 2))]
    forgotten: list[ForgottenTopic] = []
    if version >= 7:
        forgotten = [_forgotten(r, version, flexible) for _ in range(r.count(flexible, 2))]
    rack_id = r.string(flexible) if version >= 11 else ""
    body = FetchBody(
        version,
        replica_id,
        datetime.timedelta(milliseconds=max_wait),
        min_bytes,
        max_bytes,
        isolation,
        session_id,
        session_epoch,
        topics,
        forgotten,
        rack_id or "",
    )
    if flexible:

        def cluster_id(inner: _Reader) -> None:
            body.cluster_id = inner.string(True, nullable=True)

        def replica_state(inner: _Reader) -> None:
            replica, epoch = inner.unpack(_REPLICA_STATE)
            inner.tagged()
            body.replica_state = ReplicaState(replica, epoch)
            body.replica_id = replica

        known: dict[int, Callable[[_Reader], None]] = {0: cluster_id}
        if version >= REPLICA_STATE_VERSION:
            known[1] = replica_state
        r.tagged(known)
    return body, r.pos


def _topic(r: _Reader, version: int, flexible: bool, lay: Layout) -> FetchTopic:
    if version >= TOPIC_IDS_VERSION:
        name, topic_id = None, r.uuid()
    else:
        name, topic_id = r.string(flexible), None
    size = lay.entry.size
    n = r.count(flexible, size)
    start = r.pos
    end = start + n * size
    buf = r.buf
    directory_ids: dict[int, uuid.UUID] = {}
    block = None
    entries: list[tuple[int, ...]] | None = None
    if end <= r.end and (not flexible or buf[start + size - 1 : end : size].count(0) == n):
        # Fixed-size entries (for a flexible version: none has a tagged field): unpacked
        # when first used.
        block = bytes(buf[start:end])
        r.pos = end
    elif not flexible:
        raise MalformedFetch(f"{n} partitions of {size} bytes with {r.end - start} left")
    else:
        entries = [_entry(r, version, directory_ids) for _ in range(n)]
    if flexible:
        r.tagged()
    return FetchTopic(name, topic_id, entries, lay, directory_ids, block)


_FLEXIBLE_ENTRY = struct.Struct(">iiqiqi")


def _entry(r: _Reader, version: int, directory_ids: dict[int, uuid.UUID]) -> tuple[int, ...]:
    """A flexible partition entry with tagged fields (replica_directory_id, tag 0, v17+),
    as the fast path's tuple: the tagged-field count read as 0."""
    raw = r.unpack(_FLEXIBLE_ENTRY)
    # The last entry of a partition index wins, also when it carries no directory id.
    directory_ids.pop(raw[0], None)

    def directory_id(inner: _Reader) -> None:
        found = inner.uuid()
        if found is not None:
            directory_ids[raw[0]] = found

    r.tagged({0: directory_id} if version >= 17 else None)
    return (*raw, 0)


def _forgotten(r: _Reader, version: int, flexible: bool) -> ForgottenTopic:
    if version >= TOPIC_IDS_VERSION:
        name, topic_id = None, r.uuid()
    else:
        name, topic_id = r.string(flexible), None
    n = r.count(flexible, 4)
    at = r.take(4 * n)
    partitions = [p for (p,) in struct.iter_unpack(">i", r.buf[at : at + 4 * n])]
    if flexible:
        r.tagged()
    return ForgottenTopic(name, topic_id, partitions)
