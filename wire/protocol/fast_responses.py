"""Hand-written encoders of the hot responses, Produce and Fetch, for their common shape.

kio's writers call a function per field into a BytesIO and copy the records twice (into
the BytesIO, then out of it): 1.2 ms for a 1 MiB fetch, 90 ms for a fetch of 10,000
empty partitions (scripts/bench/wire.py). These pack each entity's fixed fields with one
struct call and leave the records bytes as they are, as a piece of their own.

They take a response only when none of its tagged fields differs from its default
(kio writes those; here they are one 0 byte), else return None and kio writes it.
tests/wire/test_fast_responses.py holds them to kio's bytes for every version.

A Fetch answer of many partitions is not built as kio entities at all: the handler encodes
each partition's entry with ``fetch_partition`` (and keeps the entry of a partition with
nothing new, to send again while its offsets stay as they are) and hands a ``FetchAnswer``
of those pieces, which ``fetch_response`` frames. Nor is a Produce answer: the handler hands a
``ProduceAnswer`` of plain tuples; a kio ProduceResponse (tests build them) is read into
one and written the same way.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import cache
from typing import Any, ClassVar

_ZERO_UUID = bytes(16)
_I32 = struct.Struct(">i")
_HEADER_V0 = struct.Struct(">ii")  # size, correlation id
_HEADER_V1 = struct.Struct(">iib")  # size, correlation id, no tagged fields
_FETCH_TOP = struct.Struct(">ihi")  # throttle, error code, session id (v7+)
_PARTITION = {  # partition index, error code, high watermark, last stable, log start
    4: struct.Struct(">ihqq"),
    5: struct.Struct(">ihqqq"),
}
_ABORTED = struct.Struct(">qq")
_PRODUCE_PARTITION = {  # index, error code, base offset, log append time, log start
    3: struct.Struct(">ihqq"),
    5: struct.Struct(">ihqqq"),
}
# Below this many bytes a piece is joined with its neighbours; above, it stays a piece.
_SEPARATE = 16 * 1024


def _uvarint(v: int) -> bytes:
    out = bytearray()
    while v > 0x7F:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_SMALL_UVARINT = [_uvarint(v) for v in range(256)]


def _uv(v: int) -> bytes:
    return _SMALL_UVARINT[v] if v < 256 else _uvarint(v)


def _string(s: str, flexible: bool) -> bytes:
    raw = s.encode()
    return (_uv(len(raw) + 1) if flexible else len(raw).to_bytes(2, "big")) + raw


def _nullable_string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\0" if flexible else b"\xff\xff"
    return _string(s, flexible)


def _count(n: int, flexible: bool) -> bytes:
    return _uv(n + 1) if flexible else _I32.pack(n)


def _ms(delta: Any) -> int:
    return round(delta.total_seconds() * 1000)


def _frame(correlation_id: int, flexible: bool, parts: list[bytes]) -> list[bytes]:
    """Size-prefixed frame as pieces: small ones joined, large records left alone."""
    size = sum(map(len, parts))
    if flexible:
        head = _HEADER_V1.pack(size + 5, correlation_id, 0)
    else:
        head = _HEADER_V0.pack(size + 4, correlation_id)
    if not parts or max(map(len, parts)) < _SEPARATE:  # one piece: no loop per part
        return [b"".join((head, *parts))]
    pieces: list[bytes] = []
    small = [head]
    for part in parts:
        if len(part) >= _SEPARATE:
            pieces += (b"".join(small), part)
            small = []
        else:
            small.append(part)
    if small:
        pieces.append(b"".join(small))
    return pieces


def _defaults(entity: Any, names: tuple[str, ...]) -> bool:
    """Whether every tagged field in ``names`` holds its default (an entity of -1s)."""
    cls: type = type(entity)  # (type[Any], the checker says, is not Hashable)
    for name, default in _tag_defaults(cls, names):
        value = getattr(entity, name)
        if value is not default and value != default:
            return False
    return True


@cache
def _tag_defaults(cls: type, names: tuple[str, ...]) -> tuple[tuple[str, Any], ...]:
    """(name, default) of the fields in ``names`` that ``cls`` has: kio's default is one
    instance per class, so a field left at it is that very object."""
    return tuple((f.name, f.default) for f in fields(cls) if f.name in names)


_PARTITION_TAGS = ("diverging_epoch", "current_leader", "snapshot_id")


@dataclass(frozen=True, slots=True)
class EncodedTopic:
    """A topic of a FetchAnswer: its name (v4-v12) or id (v13+) and its partitions'
    entries, already encoded (``fetch_partition``), as pieces in order."""

    topic: str | None
    topic_id: uuid.UUID | None
    count: int  # partitions
    pieces: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """A Fetch response whose partitions are encoded already; the fields the quotas
    change (throttle_time, responses) are kio's names."""

    __api_key__: ClassVar[int] = 1
    version: int
    throttle_time: datetime.timedelta
    error_code: int
    session_id: int
    responses: tuple[EncodedTopic, ...]


_EMPTY_ABORTED = {False: b"\0\0\0\0", True: b"\x01"}  # no aborted transactions (not null)
_EMPTY_RECORDS = {False: b"\0\0\0\0", True: b"\x01"}  # records of 0 bytes (not null)


def fetch_partition(
    version: int,
    index: int,
    error: int,
    high_watermark: int,
    last_stable: int,
    log_start: int,
    aborted: Sequence[tuple[int, int, int]],
    batches: Sequence[bytes],
) -> list[bytes]:
    """A PartitionData entry of Fetch ``version`` without tagged fields, as pieces: the
    batches as they are (not copied) when large. ``aborted``: (producer id, first offset,
    marker offset)."""
    flexible = version >= 12
    if version >= 5:
        head = _PARTITION[5].pack(index, error, high_watermark, last_stable, log_start)
    else:
        head = _PARTITION[4].pack(index, error, high_watermark, last_stable)
    if aborted:
        tag = b"\0" if flexible else b""
        head += _count(len(aborted), flexible) + b"".join(
            _ABORTED.pack(pid, first) + tag for pid, first, _ in aborted
        )
    else:
        head += _EMPTY_ABORTED[flexible]
    if version >= 11:
        head += b"\xff\xff\xff\xff"  # preferred_read_replica -1
    size = sum(map(len, batches))
    if not size:
        return [head + _EMPTY_RECORDS[flexible] + (b"\0" if flexible else b"")]
    head += _uv(size + 1) if flexible else _I32.pack(size)
    if size < _SEPARATE:
        return [head + b"".join(batches) + (b"\0" if flexible else b"")]
    return [head, *batches, b"\0"] if flexible else [head, *batches]


def _fetch_answer(correlation_id: int, response: FetchAnswer) -> list[bytes]:
    version = response.version
    flexible = version >= 12
    throttle = _ms(response.throttle_time)
    parts: list[bytes] = []
    if version >= 7:
        parts.append(_FETCH_TOP.pack(throttle, response.error_code, response.session_id))
    else:
        parts.append(_I32.pack(throttle))
    parts.append(_count(len(response.responses), flexible))
    for topic in response.responses:
        if version >= 13:
            parts.append(_ZERO_UUID if topic.topic_id is None else topic.topic_id.bytes)
        else:
            parts.append(_string(topic.topic or "", flexible))
        parts.append(_count(topic.count, flexible))
        parts += topic.pieces
        if flexible:
            parts.append(b"\0")
    if flexible:
        parts.append(b"\0")  # the response's tagged fields: node_endpoints are none
    return _frame(correlation_id, flexible, parts)


def fetch_response(correlation_id: int, response: Any) -> list[bytes] | None:
    """A FetchResponse (v4 to v17) as frame pieces; None if it has tagged fields to write
    (or is of another version)."""
    if isinstance(response, FetchAnswer):
        return _fetch_answer(correlation_id, response)
    version = response.__version__
    flexible = version >= 12
    endpoints = getattr(response, "node_endpoints", ())
    if not 4 <= version <= 17 or endpoints:
        return None
    parts: list[bytes] = []
    add = parts.append
    throttle = _ms(response.throttle_time)
    if version >= 7:
        add(_FETCH_TOP.pack(throttle, response.error_code.value, response.session_id))
    else:
        add(_I32.pack(throttle))
    add(_count(len(response.responses), flexible))
    fixed = _PARTITION[5 if version >= 5 else 4]
    for topic in response.responses:
        if version >= 13:
            # A request may name a null topic id (answered UNKNOWN_TOPIC_ID): the zero
            # uuid on the wire, as kio writes it.
            add(_ZERO_UUID if topic.topic_id is None else topic.topic_id.bytes)
        else:
            add(_string(topic.topic, flexible))
        add(_count(len(topic.partitions), flexible))
        for p in topic.partitions:
            if flexible and not _defaults(p, _PARTITION_TAGS):
                return None
            head = [p.partition_index, p.error_code.value, p.high_watermark, p.last_stable_offset]
            if version >= 5:
                head.append(p.log_start_offset)
            add(fixed.pack(*head))
            aborted = p.aborted_transactions
            if aborted is None:
                add(b"\0" if flexible else b"\xff\xff\xff\xff")
            else:
                add(_count(len(aborted), flexible))
                for a in aborted:
                    add(_ABORTED.pack(a.producer_id, a.first_offset))
                    if flexible:
                        add(b"\0")
            if version >= 11:
                add(_I32.pack(p.preferred_read_replica))
            records = p.records
            if records is None:
                add(b"\0" if flexible else b"\xff\xff\xff\xff")
            else:
                add(_uv(len(records) + 1) if flexible else _I32.pack(len(records)))
                add(records)
            if flexible:
                add(b"\0")
        if flexible:
            add(b"\0")
    if flexible:
        add(b"\0")
    return _frame(correlation_id, flexible, parts)


# One partition of a ProduceAnswer: index, error code, base offset, log append time (ms,
# -1: none), log start offset, record errors ((batch index, message), v8+), error message.
PartitionAnswer = tuple[int, int, int, int, int, tuple[tuple[int, str | None], ...], str | None]


@dataclass(slots=True)  # not frozen: built a third faster, per request
class ProduceAnswer:
    """A Produce response as the handler answers it, with no kio entity per topic and
    partition (building them cost more than the rest of a one-record answer); the field
    the quotas change (throttle_time) keeps kio's name."""

    __api_key__: ClassVar[int] = 0
    version: int
    throttle_time: datetime.timedelta
    responses: tuple[tuple[str, tuple[PartitionAnswer, ...]], ...]  # (topic, partitions)


def produce_response(correlation_id: int, response: Any) -> list[bytes] | None:
    """A ProduceResponse (v3 to v12), a ProduceAnswer or kio's entity, as frame pieces;
    None for an entity with tagged fields to write (or of another version)."""
    if isinstance(response, ProduceAnswer):
        return _produce_answer(correlation_id, response)
    version = response.__version__
    endpoints = getattr(response, "node_endpoints", ())
    if not 3 <= version <= 12 or endpoints:
        return None
    responses = []
    for topic in response.responses:
        partitions = []
        for p in topic.partition_responses:
            if version >= 9 and not _defaults(p, ("current_leader",)):
                return None
            append_time = p.log_append_time
            errors = getattr(p, "record_errors", ())
            partitions.append(
                (
                    p.index,
                    p.error_code.value,
                    p.base_offset,
                    -1 if append_time is None else round(append_time.timestamp() * 1000),
                    getattr(p, "log_start_offset", -1),
                    tuple((e.batch_index, e.batch_index_error_message) for e in errors),
                    getattr(p, "error_message", None),
                )
            )
        responses.append((topic.name, tuple(partitions)))
    answer = ProduceAnswer(version, response.throttle_time, tuple(responses))
    return _produce_answer(correlation_id, answer)


def _produce_answer(correlation_id: int, response: ProduceAnswer) -> list[bytes]:
    version = response.version
    flexible = version >= 9
    parts: list[bytes] = []
    add = parts.append
    add(_count(len(response.responses), flexible))
    fixed = _PRODUCE_PARTITION[5 if version >= 5 else 3]
    for name, partitions in response.responses:
        add(_string(name, flexible))
        add(_count(len(partitions), flexible))
        for index, code, base, append_ms, log_start, errors, message in partitions:
            if version >= 5:
                add(fixed.pack(index, code, base, append_ms, log_start))
            else:
                add(fixed.pack(index, code, base, append_ms))
            if version >= 8:
                add(_count(len(errors), flexible))
                for batch_index, batch_message in errors:
                    add(_I32.pack(batch_index))
                    add(_nullable_string(batch_message, flexible))
                    if flexible:
                        add(b"\0")
                add(_nullable_string(message, flexible))
            if flexible:
                add(b"\0")  # current_leader (v10+) at its default: no tagged fields
        if flexible:
            add(b"\0")
    add(_I32.pack(_ms(response.throttle_time)))
    if flexible:
        add(b"\0")  # node_endpoints (v10+): none
    return _frame(correlation_id, flexible, parts)


ENCODERS = {0: produce_response, 1: fetch_response}
