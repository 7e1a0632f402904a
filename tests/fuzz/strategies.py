"""Hypothesis strategies of fuzz cases: the bytes one connection sends to the broker.

Four families:

* ``requests``: one to three pipelined requests of the api keys and versions the broker
  advertises, generated field by field from kio's request entity classes and framed with
  kio's writers. Every one must be answered, except after a produce with acks=0 (which is
  not answered and may close the connection when it fails).
* ``mutated_frames``: a valid request frame with a few byte mutations (bit flips, integers
  overwritten where lengths and counts live, truncations, insertions, deletions, another
  api key or version), its size prefix fixed up or not; or a request with null arrays its
  schema does not allow. Any well-formed answer or a closed connection is fine.
* ``mutated_batches``: produce requests whose record batches are damaged (CRC, lengths,
  magic, attributes, record counts, truncated or garbled records, compressed data that does
  not decompress or decompresses to far too much), the CRC recomputed or not. The request
  itself is well formed, so it must be answered.
* ``group_sessions``: a member joins a group, then sends generated group requests with
  its own member id and generation (mostly), so they reach the coordinator's rounds
  rather than only failing lookups of unknown members.
* ``odd_names``: a valid request with every string field (topic, group, transactional
  id, user, principal, config name...) a name with NUL bytes, which must be answered, or
  bytes that are no UTF-8, which may be refused; never an internal error.
* ``announced_sizes``: a size prefix announcing a large request, the largest, or more,
  then a few bytes and the end of the input: closed, without the announced memory.
* ``dribbled``: valid requests sent a few bytes at a time: answered as usual.

Names come mostly from small pools: the topics and groups of ``POOL_TOPICS`` and
``POOL_GROUPS`` (which the harness creates first), so requests reach real partitions and
groups, and a few generated names from a tiny alphabet, so a long run creates a bounded
number of topics and groups. Requests that may wait (Fetch, JoinGroup, SyncGroup) get
short or negative timeouts, so cases stay fast and nothing waits on after a case.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import types
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import cramjam
from crc32c import crc32c
from hypothesis import strategies as st
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import Interval, Records, i32Timedelta

from kafkaesque.records.batch import (
    ATTR_COMPRESSION,
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES,
    BATCH_LENGTH,
    CRC,
    HEADER_SIZE,
    LAST_OFFSET_DELTA,
    MAGIC_FIELD,
    RECORD_COUNT,
)
from kafkaesque.records.body import encode_uvarint
from kafkaesque.records.build import build_batch
from kafkaesque.records.compression import Compression, compress
from tests.kafka_client import assignment_bytes, encode_request, produce_request, subscription
from wire.handlers import supported
from wire.protocol.codec import request_schema, schema_class

Draw = Callable[[st.SearchStrategy[Any]], Any]

POOL_TOPICS = {"fuzz-one": 1, "fuzz-three": 3}  # name -> partitions
POOL_GROUPS = ("fuzz-group", "fuzz-other")
# Names that must be refused or handled with care: empty, too long, reserved, odd bytes.
ODD_NAMES = ("", ".", "..", "a" * 249, "a" * 250, "bad/name", "ü", "\x00", " ", "__consumer")
PRODUCE, FETCH, JOIN_GROUP, SYNC_GROUP = 0, 1, 11, 14
# Requests that may legitimately wait for a timeout of their own before they are answered.
WAITING_APIS = frozenset({FETCH, JOIN_GROUP, SYNC_GROUP})
WAITING_DURATIONS = frozenset({"max_wait", "session_timeout", "rebalance_timeout"})
MAX_ITEMS = 3  # elements of a generated array
REPR_BYTES = 2048  # of a case's data shown in reports (decompression bombs are large)
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True)
class Case:
    """What one connection sends; the first ``answers`` frames must be answered. With
    ``dribble``, the bytes go ``dribble`` at a time, each send apart (a slow client)."""

    kind: str
    data: bytes
    answers: int
    what: str  # the requests it was made of, for reports
    dribble: int = 0

    def __repr__(self) -> str:
        shown = self.data[:REPR_BYTES].hex() + ("..." if len(self.data) > REPR_BYTES else "")
        size = len(self.data)
        sent = f"; dribbled {self.dribble} at a time" if self.dribble else ""
        return (
            f"Case({self.kind}: {self.what}; answers={self.answers}{sent}; {size} bytes: {shown})"
        )


# -- the advertised APIs -------------------------------------------------------------------


@cache
def api_versions() -> list[tuple[int, int]]:
    """Every (api key, version) the broker advertises and kio can encode. Produce v0-v2 is
    advertised for librdkafka's sake but parsed by nothing: mutated frames reach it."""
    return [
        (key, version)
        for key, (low, high) in sorted(supported().items())
        for version in range(low, high + 1)
        if request_schema(key, version) is not None
    ]


# -- leaf values ---------------------------------------------------------------------------


@cache
def integers_of(tp: type) -> st.SearchStrategy[int]:
    """Small values, the type's edges, or anything in its range."""
    low, high = tp.__low__, tp.__high__  # type: ignore[attr-defined]
    edges = sorted({v for v in (low, low + 1, -2, -1, 0, 1, 2, high - 1, high) if low <= v <= high})
    return st.one_of(
        st.integers(max(low, -2), min(high, 10)),
        st.sampled_from(edges),
        st.integers(low, high),
    )


@cache
def durations(name: str, tp: type) -> st.SearchStrategy[datetime.timedelta]:
    if name in WAITING_DURATIONS:
        ms = st.one_of(st.integers(0, 100), st.integers(-(2**31), -1))
    elif tp is i32Timedelta:
        ms = st.one_of(st.integers(0, 100), st.integers(-(2**31), 2**31 - 1))
    else:
        # i64: kio reads at most 2**63 // 1000 ms (it counts microseconds in an int64) and
        # writes through a float, exact to 2**53.
        ms = st.one_of(st.integers(0, 100), st.integers(-(2**53), 2**53))
    return ms.map(lambda v: datetime.timedelta(milliseconds=v))


@cache
def topic_names() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(sorted(POOL_TOPICS)),
        st.text("ab._-", min_size=1, max_size=3),  # at most 155 topics get created
        st.sampled_from(ODD_NAMES),
        # Anything else, kept invalid by the "/" so it creates nothing.
        st.text(max_size=8).map(lambda s: s + "/"),
    )


@cache
def group_names() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(POOL_GROUPS),
        st.text("gh", min_size=1, max_size=3),
        st.sampled_from(ODD_NAMES),
    )


@cache
def texts() -> st.SearchStrategy[str]:
    return st.one_of(st.text(max_size=12), st.sampled_from(ODD_NAMES))


CONFIG_NAMES = (
    "retention.ms",
    "kafkaesque.page.size",
    "kafkaesque.max.pages",
    "cleanup.policy",
    "compression.type",
    "message.timestamp.type",
    "min.insync.replicas",
    "broker.id",
)
CONFIG_VALUES = ("-1", "0", "1", "1000", "delete", "compact", "producer", "1e3", "9" * 30)


@cache
def member_metadata() -> st.SearchStrategy[bytes]:
    """A JoinGroup protocol's metadata: a subscription, or bytes."""
    return st.one_of(
        st.binary(max_size=64), st.lists(topic_names(), max_size=MAX_ITEMS).map(subscription)
    )


# Fields whose meaning a type does not tell, by name (types come first: see ``leaf``).
FIELDS: dict[str, Callable[[], st.SearchStrategy[Any]]] = {
    "metadata": member_metadata,
    "assignment": lambda: st.one_of(
        st.binary(max_size=64),
        st.dictionaries(topic_names(), st.lists(st.integers(-1, 3), max_size=3)).map(
            assignment_bytes
        ),
    ),
    "protocol_type": lambda: st.one_of(st.sampled_from(("consumer", "", "connect")), texts()),
    "name": lambda: st.one_of(st.sampled_from(("range", "roundrobin", *CONFIG_NAMES)), texts()),
    "configuration_keys": lambda: st.one_of(st.sampled_from(CONFIG_NAMES), texts()),
    "value": lambda: st.one_of(st.sampled_from(CONFIG_VALUES), texts()),
    "committed_metadata": lambda: st.one_of(texts(), st.just("m" * 4097)),
    "key": group_names,  # FindCoordinator's group
    "resource_name": lambda: st.one_of(topic_names(), st.sampled_from(("0", "1"))),
    "member_id": lambda: st.one_of(st.just(""), texts()),
}


def leaf(name: str, tp: type, nulls: bool = False) -> st.SearchStrategy[Any]:
    """Values of one field (an element, for an array) of type ``tp``."""
    if dataclasses.is_dataclass(tp):
        return entities(tp, nulls)
    if tp is TopicName:
        return topic_names()
    if tp is GroupId:
        return group_names()
    if tp is Records:
        return records()
    if isinstance(tp, type) and issubclass(tp, float):  # client quotas' "value", say
        return st.floats()
    if name in FIELDS:
        return FIELDS[name]()
    if tp is bool:
        return st.booleans()
    if isinstance(tp, type) and issubclass(tp, Interval):
        return integers_of(tp)
    if isinstance(tp, type) and issubclass(tp, datetime.timedelta):
        return durations(name, tp)
    if tp is uuid.UUID:
        return st.one_of(st.just(uuid.UUID(int=0)), st.uuids())
    if isinstance(tp, type) and issubclass(tp, str):
        return texts()
    if tp is bytes:
        return st.binary(max_size=64)
    return st.from_type(tp)


def _without_none(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        return next(a for a in typing.get_args(tp) if a is not type(None)), True
    return tp, False


def field_values(f: dataclasses.Field, nulls: bool = False) -> st.SearchStrategy[Any]:
    """``nulls``: arrays the schema says cannot be null are null a quarter of the time
    (kio writes them, and reads them back as None)."""
    tp, nullable = _without_none(f.type)
    if typing.get_origin(tp) is tuple:
        element, _ = _without_none(typing.get_args(tp)[0])
        values = st.lists(leaf(f.name, element, nulls), max_size=MAX_ITEMS).map(tuple)
        if nulls and not nullable:
            return st.one_of(values, values, values, st.none())
    else:
        values = leaf(f.name, tp, nulls)
    return st.one_of(st.none(), values) if nullable else values


@cache
def entities(cls: type, nulls: bool = False) -> st.SearchStrategy[Any]:
    """Instances of a kio entity class, every field drawn by ``field_values``."""
    return st.builds(
        cls, **{f.name: field_values(f, nulls) for f in dataclasses.fields(cls) if f.init}
    )


# -- record batches ------------------------------------------------------------------------


def _batch(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    keyed: bool,
    with_headers: bool,
    producer: tuple[int, int, int],
    timestamp: int,
    codec: Compression,
) -> bytes:
    return build_batch(
        [value for value, _, _ in records],
        [key for _, key, _ in records] if keyed else None,
        timestamp=timestamp,
        headers=[headers for _, _, headers in records] if with_headers else None,
        compression=codec,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
    )


@cache
def batches() -> st.SearchStrategy[bytes]:
    """A valid RecordBatch v2, compressed or not, from a plain or an idempotent producer."""
    optional_bytes = st.one_of(st.none(), st.binary(max_size=40))
    header = st.tuples(st.text(max_size=6), optional_bytes)
    record = st.tuples(optional_bytes, optional_bytes, st.lists(header, max_size=2))
    return st.builds(
        _batch,
        st.lists(record, min_size=1, max_size=4),
        st.booleans(),
        st.booleans(),
        st.one_of(
            st.just((-1, -1, -1)),
            st.tuples(st.integers(0, 50), st.integers(0, 2), st.integers(0, 20)),
        ),
        st.one_of(st.integers(0, 2**41), st.sampled_from((-1, 2**63 - 1))),
        st.sampled_from(Compression),
    )


@cache
def records() -> st.SearchStrategy[bytes]:
    """A produce request's records: valid batches mostly, else bytes."""
    return st.one_of(
        st.lists(batches(), min_size=1, max_size=2).map(b"".join),
        st.binary(max_size=80),
    )


# -- well-formed requests ------------------------------------------------------------------


@cache
def request_entities(nulls: bool = False) -> st.SearchStrategy[Any]:
    return st.sampled_from(api_versions()).flatmap(lambda kv: entities(request_schema(*kv), nulls))


@cache
def client_ids() -> st.SearchStrategy[str | None]:
    return st.one_of(st.just("fuzz"), st.none(), texts())


@cache
def correlation_ids() -> st.SearchStrategy[int]:
    return st.integers(-(2**31), 2**31 - 1 - MAX_ITEMS)


def _name(req: Any) -> str:
    return f"{type(req).__name__} v{req.__version__}"


@st.composite
def requests(draw: Draw) -> Case:
    """One to three valid requests on one connection, sent without waiting for answers."""
    reqs = draw(st.lists(request_entities(), min_size=1, max_size=MAX_ITEMS))
    first, client_id = draw(correlation_ids()), draw(client_ids())
    frames = [encode_request(r, first + i, client_id) for i, r in enumerate(reqs)]
    # After a produce with acks=0 nothing need come: it has no answer and closes the
    # connection when it fails.
    answers = next((i for i, r in enumerate(reqs) if getattr(r, "acks", None) == 0), len(reqs))
    return Case("request", b"".join(frames), answers, ", ".join(map(_name, reqs)))


# -- names no topic, group or user can have ------------------------------------------------

# Valid UTF-8 with NUL bytes: no text to PostgreSQL, no name to Kafka.
NUL_NAMES = ("\x00", "a\x00b", "\x00" * 3, "fuzz-one\x00", "fuzz-group\x00")
# Written in every name field, then replaced in the frame by as many bytes of no UTF-8.
_SENTINEL = b"\x01odd-name\x01"
NOT_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80", b"\xf8\x88\x80\x80\x80")


def with_names(entity: Any, name: str) -> Any:
    """``entity`` with every string field (names, ids, principals...), nested too, set to
    ``name``."""
    changes = {}
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if isinstance(value, str):
            changes[f.name] = name
        elif dataclasses.is_dataclass(value):
            changes[f.name] = with_names(value, name)
        elif isinstance(value, tuple) and value:
            changes[f.name] = tuple(
                name
                if isinstance(v, str)
                else with_names(v, name)
                if dataclasses.is_dataclass(v)
                else v
                for v in value
            )
    return dataclasses.replace(entity, **changes)


@st.composite
def odd_names(draw: Draw) -> Case:
    """A valid request with every name field (and, half the time, the client id) a NUL
    name, which must be answered; or bytes that are no UTF-8 in all of them, which the
    broker may answer or refuse (closing the connection), but not fail on."""
    req = draw(request_entities())
    correlation_id = draw(correlation_ids())
    if draw(st.booleans()):
        name = draw(st.sampled_from(NUL_NAMES))
        client_id = name if draw(st.booleans()) else "fuzz"
        frame = encode_request(with_names(req, name), correlation_id, client_id)
        answers = 0 if getattr(req, "acks", None) == 0 else 1
        return Case("odd-name", frame, answers, f"{_name(req)} (names {name!r})")
    bad = draw(st.sampled_from(NOT_UTF8))
    replacement = (bad * len(_SENTINEL))[: len(_SENTINEL)]
    client_id = _SENTINEL.decode() if draw(st.booleans()) else "fuzz"
    frame = encode_request(with_names(req, _SENTINEL.decode()), correlation_id, client_id)
    frame = frame.replace(_SENTINEL, replacement)
    return Case("odd-name", frame, 0, f"{_name(req)} (names of bytes {bad!r}, no UTF-8)")


# -- announced sizes and slow clients --------------------------------------------------------

ANNOUNCED_SIZES = (1 << 20, (1 << 20) + 1, 60 << 20, 100 << 20, (100 << 20) + 1, 2**31 - 1, -1, 0)


@st.composite
def announced_sizes(draw: Draw) -> Case:
    """A size prefix announcing far more than follows (a large request, the largest one,
    beyond it), then the start of a request, and the end of the input: refused or closed
    at the end, without an answer, and without the memory of the size announced."""
    frame = encode_request(draw(request_entities()), draw(correlation_ids()))
    size = draw(st.one_of(st.sampled_from(ANNOUNCED_SIZES), st.integers(len(frame), 100 << 20)))
    kept = frame[4 : 4 + draw(st.integers(0, len(frame) - 4))]
    return Case("announced", _I32.pack(size) + kept, 0, f"{size} bytes announced, {len(kept)} sent")


@st.composite
def dribbled(draw: Draw) -> Case:
    """Valid requests sent a few bytes at a time, each send apart: answered all the same."""
    case = draw(requests())
    return dataclasses.replace(case, kind="dribbled", dribble=draw(st.sampled_from((1, 3, 17))))


# -- mutated frames ------------------------------------------------------------------------


def _position(draw: Draw, buf: bytearray, width: int = 1) -> int:
    return draw(st.integers(0, max(0, len(buf) - width)))


def _interesting(draw: Draw, width: int, size: int) -> int:
    """A value for a ``width``-byte field: edges of signed and unsigned ranges, or the
    sizes around ``size`` (the buffer's) that length fields get wrong."""
    bits = 8 * width
    value = draw(
        st.one_of(
            st.sampled_from((0, 1, -1, 2, 0x7F, 0x80, 0xFF)),
            st.sampled_from(
                (2 ** (bits - 1) - 1, 2 ** (bits - 1), 2**bits - 1, 2**bits - 2, 0x7FFF, 0x8000)
            ),
            st.integers(size - 2, size + 2),
            st.integers(0, 2**bits - 1),
        )
    )
    return value % 2**bits


def flip_bit(draw: Draw, buf: bytearray) -> None:
    if buf:
        buf[_position(draw, buf)] ^= 1 << draw(st.integers(0, 7))


def set_byte(draw: Draw, buf: bytearray) -> None:
    if buf:
        value = draw(
            st.one_of(st.sampled_from((0, 1, 0x7F, 0x80, 0xFE, 0xFF)), st.integers(0, 255))
        )
        buf[_position(draw, buf)] = value


def set_integer(draw: Draw, buf: bytearray) -> None:
    """Overwrite 1, 2, 4 or 8 bytes: where a length, count or size lives, a bad one."""
    width = draw(st.sampled_from((1, 2, 4, 8)))
    if len(buf) >= width:
        pos = _position(draw, buf, width)
        buf[pos : pos + width] = _interesting(draw, width, len(buf)).to_bytes(width, "big")


def set_varint(draw: Draw, buf: bytearray) -> None:
    """Replace a byte by an unsigned varint (a compact length or count, or a tag)."""
    if buf:
        pos = _position(draw, buf)
        value = _interesting(draw, draw(st.sampled_from((1, 2, 4, 5))), len(buf))
        buf[pos : pos + 1] = encode_uvarint(value)


def truncate(draw: Draw, buf: bytearray) -> None:
    if buf:
        del buf[_position(draw, buf) :]


def insert(draw: Draw, buf: bytearray) -> None:
    pos = _position(draw, buf)
    buf[pos:pos] = draw(st.binary(min_size=1, max_size=16))


def delete(draw: Draw, buf: bytearray) -> None:
    if buf:
        pos = _position(draw, buf)
        del buf[pos : pos + draw(st.integers(1, 8))]


def duplicate(draw: Draw, buf: bytearray) -> None:
    """Copy a slice elsewhere: repeated fields, arrays longer than their count."""
    if buf:
        start = _position(draw, buf)
        piece = buf[start : start + draw(st.integers(1, 16))]
        at = _position(draw, buf)
        buf[at:at] = piece


def retarget(draw: Draw, buf: bytearray) -> None:
    """Another api key or version in the header: unknown ones, advertised ones kio cannot
    parse (Produce v0-v2), and ones whose body has another layout."""
    if len(buf) >= 8:
        if draw(st.booleans()):
            keys = sorted(supported())
            _I16.pack_into(buf, 4, draw(st.one_of(st.sampled_from(keys), st.integers(-1, 70))))
        _I16.pack_into(buf, 6, draw(st.integers(-1, 16)))


MUTATIONS = (
    flip_bit,
    set_byte,
    set_integer,
    set_varint,
    truncate,
    insert,
    delete,
    duplicate,
    retarget,
)


def mutate(draw: Draw, buf: bytearray, mutations: tuple[Callable[..., None], ...]) -> list[str]:
    """Apply one to three of ``mutations``; their names."""
    names = []
    for _ in range(draw(st.integers(1, 3))):
        mutation = draw(st.sampled_from(mutations))
        mutation(draw, buf)
        names.append(mutation.__name__)
    return names


@st.composite
def mutated_frames(draw: Draw) -> Case:
    """A valid frame, mutated; its size prefix mostly fixed so the parser sees the damage.
    A quarter are instead well framed but have null arrays the schema does not allow."""
    nulls = draw(st.integers(0, 3)) == 0
    req = draw(request_entities(nulls))
    frame = bytearray(encode_request(req, draw(correlation_ids()), draw(client_ids())))
    done = ["null arrays"] if nulls else mutate(draw, frame, MUTATIONS)
    if not nulls and len(frame) >= 4 and draw(st.integers(0, 3)):
        _I32.pack_into(frame, 0, len(frame) - 4)
        done.append("size fixed")
    # Sometimes a valid request follows: it is answered, or the connection was closed.
    if draw(st.booleans()):
        api_versions = entities(request_schema(18, 0))
        # Another correlation id than the first request's, so answers tell which is which.
        correlation_id = (_I32.unpack_from(frame, 8)[0] if len(frame) >= 12 else 0) + 1
        frame += encode_request(draw(api_versions), (correlation_id + 2**31) % 2**32 - 2**31)
        done.append("then ApiVersions")
    return Case("mutated-frame", bytes(frame), 0, f"{_name(req)} ({', '.join(done)})")


# -- mutated record batches ----------------------------------------------------------------


def _int_at(field: slice) -> tuple[int, int]:
    return field.start, field.stop - field.start


def set_field(buf: bytearray, field: slice, value: int) -> None:
    start, width = _int_at(field)
    buf[start : start + width] = (value % 2 ** (8 * width)).to_bytes(width, "big")


def fix_length(buf: bytearray) -> None:
    set_field(buf, BATCH_LENGTH, len(buf) - BATCH_LENGTH.stop)


def fix_crc(buf: bytearray) -> None:
    if len(buf) >= HEADER_SIZE:
        set_field(buf, CRC, crc32c(bytes(buf[ATTRIBUTES.start :])))


def bad_crc(draw: Draw, buf: bytearray) -> bool:
    set_field(buf, CRC, draw(st.integers(0, 2**32 - 1)))
    return False  # the CRC must stay wrong


def bad_length(draw: Draw, buf: bytearray) -> bool:
    set_field(buf, BATCH_LENGTH, _interesting(draw, 4, len(buf) - BATCH_LENGTH.stop))
    return True


def bad_magic(draw: Draw, buf: bytearray) -> bool:
    buf[MAGIC_FIELD.start] = draw(st.sampled_from((0, 1, 3, 0x7F, 0xFF)))
    return True


def bad_attributes(draw: Draw, buf: bytearray) -> bool:
    """Unknown codecs, another valid codec than the data's, control or transactional bits."""
    attributes = int.from_bytes(buf[ATTRIBUTES], "big")
    attributes = draw(
        st.one_of(
            st.integers(0, 7).map(lambda c: (attributes & ~ATTR_COMPRESSION) | c),
            st.sampled_from((ATTR_CONTROL, ATTR_TRANSACTIONAL, ATTR_LOG_APPEND_TIME)).map(
                lambda bit: attributes | bit
            ),
            st.integers(0, 2**16 - 1),
        )
    )
    set_field(buf, ATTRIBUTES, attributes)
    return True


def bad_count(draw: Draw, buf: bytearray) -> bool:
    """A record count the records do not have, with a last offset delta to match or not."""
    count = draw(st.sampled_from((0, -1, 2, 5, 1000, 2**20, 2**31 - 1, -(2**31))))
    set_field(buf, RECORD_COUNT, count)
    if draw(st.booleans()):
        set_field(buf, LAST_OFFSET_DELTA, count - 1)
    return True


def bad_offset_delta(draw: Draw, buf: bytearray) -> bool:
    set_field(buf, LAST_OFFSET_DELTA, _interesting(draw, 4, 0))
    return True


def truncate_records(draw: Draw, buf: bytearray) -> bool:
    del buf[draw(st.integers(HEADER_SIZE // 2, len(buf) - 1)) :]
    if len(buf) >= HEADER_SIZE and draw(st.booleans()):
        fix_length(buf)
    return True


def extend_records(draw: Draw, buf: bytearray) -> bool:
    buf += draw(st.binary(min_size=1, max_size=32))
    if draw(st.booleans()):
        fix_length(buf)
    return True


def garble_records(draw: Draw, buf: bytearray) -> bool:
    """Damage the records area (compressed data or the records' varints) in place."""
    body = bytearray(buf[HEADER_SIZE:])
    mutate(draw, body, (flip_bit, set_byte, set_varint, insert, delete, duplicate))
    buf[HEADER_SIZE:] = body
    fix_length(buf)
    return True


@cache
def bomb(codec: Compression) -> bytes:
    """A blob of a few hundred kilobytes at most that decompresses to 256 MiB of zeros."""
    zeros = bytes(256 << 20)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(zeros, level=9))
    return compress(codec, zeros)


def decompression_bomb(draw: Draw, buf: bytearray) -> bool:
    """Records that decompress to far more than any batch the broker accepts."""
    codec = draw(st.sampled_from((Compression.GZIP, Compression.ZSTD)))
    attributes = int.from_bytes(buf[ATTRIBUTES], "big") & ~ATTR_COMPRESSION | codec
    set_field(buf, ATTRIBUTES, attributes)
    buf[HEADER_SIZE:] = bomb(codec)
    fix_length(buf)
    return True


BATCH_MUTATIONS = (
    bad_crc,
    bad_length,
    bad_magic,
    bad_attributes,
    bad_count,
    bad_offset_delta,
    truncate_records,
    extend_records,
    garble_records,
    decompression_bomb,
)


@st.composite
def mutated_batches(draw: Draw) -> Case:
    """A produce request of valid batches but one, which is damaged; its CRC mostly
    recomputed so the damage gets past the CRC check to the header and record checks."""
    batch_list = draw(st.lists(batches(), min_size=1, max_size=3))
    target = draw(st.integers(0, len(batch_list) - 1))
    damaged = bytearray(batch_list[target])
    mutation = draw(st.sampled_from(BATCH_MUTATIONS))
    crc_fixed = mutation(draw, damaged) and draw(st.integers(0, 3)) > 0
    if crc_fixed:
        fix_crc(damaged)
    batch_list[target] = bytes(damaged)
    topic = draw(st.sampled_from(sorted(POOL_TOPICS)))
    partition = draw(st.integers(0, POOL_TOPICS[topic]))  # one past the last, sometimes
    partitions = {partition: b"".join(batch_list)}
    other = (partition + 1) % POOL_TOPICS[topic]
    if other != partition and draw(st.booleans()):  # a valid batch beside it
        partitions[other] = draw(batches())
    acks = draw(st.sampled_from((1, -1, 0)))
    version = draw(st.sampled_from([v for k, v in api_versions() if k == PRODUCE]))
    req = produce_request(topic, partitions, acks=acks, version=version)
    what = f"{_name(req)} acks={acks} {mutation.__name__}{' crc fixed' if crc_fixed else ''}"
    frame = encode_request(req, draw(correlation_ids()))
    return Case("mutated-batch", frame, 0 if acks == 0 else 1, what)


# -- group sessions ------------------------------------------------------------------------

SESSION_GROUPS = ("fuzz-session-a", "fuzz-session-b")
# What a member sends once it joined: OffsetCommit, OffsetFetch, JoinGroup (again),
# Heartbeat, LeaveGroup, SyncGroup, DescribeGroups.
SESSION_APIS = frozenset({8, 9, 11, 12, 13, 14, 15})


@dataclass(frozen=True)
class Session:
    """A group member's conversation on one connection: it joins ``group`` with ``join``
    (again with the member id it is given, from v4), then sends ``follow_ups``, each with
    the group, its member id and generation filled in when paired with True. Every request
    must be answered, except that a join or sync may wait (then the session ends)."""

    group: str
    join: Any
    follow_ups: tuple[tuple[Any, bool], ...]
    what: str

    def __repr__(self) -> str:
        return f"Session({self.what}: {self.join!r}, {self.follow_ups!r})"


@cache
def _session_requests() -> st.SearchStrategy[Any]:
    pairs = [kv for kv in api_versions() if kv[0] in SESSION_APIS]
    return st.sampled_from(pairs).flatmap(lambda kv: entities(request_schema(*kv)))


@st.composite
def group_sessions(draw: Draw) -> Session:
    """A member that joins properly (a protocol, a session timeout the broker takes, a
    short rebalance timeout), then sends fuzzed group requests as itself, mostly."""
    version = draw(st.sampled_from([v for k, v in api_versions() if k == JOIN_GROUP and v >= 1]))
    join = draw(entities(request_schema(JOIN_GROUP, version)))
    protocol = schema_class(type(join), "JoinGroupRequestProtocol")
    # "range" first, so the sessions of a group always have a protocol in common.
    protocols = [protocol(name="range", metadata=draw(member_metadata()))]
    if draw(st.booleans()):
        protocols.append(protocol(name="roundrobin", metadata=draw(member_metadata())))
    group = draw(st.sampled_from(SESSION_GROUPS))
    join = dataclasses.replace(
        join,
        group_id=group,
        member_id="",
        protocol_type="consumer",
        protocols=tuple(protocols),
        session_timeout=datetime.timedelta(milliseconds=draw(st.integers(500, 3000))),
        # Short: a join waits this long for members of earlier sessions to join again.
        rebalance_timeout=datetime.timedelta(milliseconds=draw(st.integers(0, 20))),
    )
    follow_ups = draw(
        st.lists(
            st.tuples(_session_requests(), st.integers(0, 4).map(bool)),
            min_size=1,
            max_size=4,
        )
    )
    what = ", ".join(
        [_name(join), *(_name(r) + ("" if f else " as another") for r, f in follow_ups)]
    )
    return Session(group, join, tuple(follow_ups), what)


def cases() -> st.SearchStrategy[Case | Session]:
    """Any of the families."""
    return st.one_of(
        requests(),
        mutated_frames(),
        mutated_batches(),
        group_sessions(),
        odd_names(),
        announced_sizes(),
        dribbled(),
    )
