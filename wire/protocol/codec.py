"""Framing and (de)serialisation of Kafka requests and responses, without I/O.

Requests are parsed with kio's compiled readers; responses are kio entities written with
kio's writers. The header versions come from each schema (``__header_schema__``), which
encodes the protocol's rules: request header v2 and response header v1 for flexible
versions, except that ApiVersions responses always use header v0 so a client can read
them before it knows which versions the broker speaks.
"""

from __future__ import annotations

import datetime
import io
import struct
import types
import typing
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import cache
from typing import Any, Generic, TypeVar, cast

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.protocol import RequestPayload

# Kafka's socket.request.max.bytes default: larger frames are refused before reading them.
from wire.protocol.array_guard import check_flexible
from wire.protocol.fast_responses import ENCODERS
from wire.protocol.fetch_request import MalformedFetch, parse_fetch
from wire.protocol.produce_request import MalformedProduce, parse_produce

NO_THROTTLE = datetime.timedelta(0)  # every response's throttle_time: no quotas here
_SIZE = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id
# Api keys whose requests may carry bytes past their last field, which Kafka ignores:
# librdkafka writes the null topic array of a flexible Metadata request ("all topics") as
# 4 bytes, not one varint (librdkafka issue 5049); the first byte reads as null, as Kafka
# reads it, and the three zero bytes as the fields after it. librdkafka ends an
# AlterUserScramCredentials request (51) with a second empty tagged-field buffer.
_TRAILING_BYTES_IGNORED = frozenset({3, 51})
PRODUCE = 0  # parsed by wire.protocol.produce_request, not kio: a request per record costs
FETCH = 1  # parsed by wire.protocol.fetch_request, not kio: its requests may name 10,000 partitions
_BY_HAND = (PRODUCE, FETCH)
# A request's body: a handler names the kio request classes of its API's versions (an
# unparameterised Request is Request[Any]). Covariant: a request is never changed.
BodyT_co = TypeVar("BodyT_co", covariant=True)


class MalformedRequest(Exception):
    """A frame that cannot be parsed: the connection is closed, as Kafka does."""


class DropConnection(Exception):
    """A request that failed with no response to carry the error (a produce with acks=0):
    the connection is closed so the client notices, refreshes metadata and retries."""


class UnsupportedVersion(Exception):
    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"api key {api_key} version {api_version} is not supported")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@dataclass(slots=True)
class ConnectionState:
    """What the broker remembers about one client connection."""

    # (topic, partition) -> the leader epoch of the partition at this connection's last
    # fetch of it, for clients that do not send theirs (see wire/handlers/fetch.py).
    fetch_epochs: dict[tuple[str, int], int] = field(default_factory=dict)
    # Who the client is, as Kafka's authorizer names it ("User:NAME"); ANONYMOUS until it
    # authenticates, and always on a PLAINTEXT listener.
    principal: str = "User:ANONYMOUS"
    # The listener the client came in on (its Kafka name: PLAINTEXT, SASL_SSL, ...), so
    # Metadata can answer with that listener's advertised address.
    listener: str = "PLAINTEXT"
    # wire.net.sasl.SaslState on a SASL listener (None elsewhere): the authentication's state.
    sasl: Any = None
    # The kafkaesque.partition.read_types.ReadCache of this connection's fetches outside a session
    # (librdkafka, kafkajs, aiokafka): quiet partitions are not read again; closed with it.
    read_cache: Any = None
    # wire.handlers.fetch.FetchMemo: what this connection's sessionless fetches keep from
    # one to the next (the requests made of its partitions, the entries of quiet ones).
    fetch_memo: Any = None


@dataclass(frozen=True, slots=True)
class Request(Generic[BodyT_co]):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # The kio request entity; for Produce a wire.protocol.produce_request.ProduceBody, for Fetch a
    # wire.protocol.fetch_request.FetchBody.
    body: BodyT_co
    size: int  # bytes of the frame, for metrics
    client_host: str = ""  # the peer's address, for consumer group member descriptions
    connection: ConnectionState = field(default_factory=ConnectionState)

    @property
    def response_class(self) -> type:
        """The kio response entity of this request's api key and version."""
        return response_schema(self.api_key, self.api_version)

    def response_entity(self, name: str) -> type:
        """The response's nested entity class ``name`` (e.g. MetadataResponseTopic), of this
        request's version."""
        return schema_class(self.response_class, name)

    def response_entities(self, *names: str) -> tuple[type, ...]:
        """The response's nested entity classes ``names`` (e.g. MetadataResponseTopic), of
        this request's version, in order."""
        return schema_classes(self.response_class, *names)


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """api key, api version and correlation id: the part of every header that never changes."""
    if len(frame) < _HEADER_PREFIX.size:
        raise MalformedRequest(f"frame of {len(frame)} bytes is shorter than a request header")
    return _HEADER_PREFIX.unpack_from(frame)


@cache
def _reader(cls: type) -> Any:
    return entity_reader(cls)


@cache
def _writer(cls: type) -> Any:
    return entity_writer(cls)


@cache
def request_schema(api_key: int, api_version: int) -> type[RequestPayload] | None:
    try:
        return load_request_schema(api_key, api_version)
    except (UnknownEntity, UnknownAPIKey):
        return None


@cache
def response_schema(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


def parse_request(
    frame: bytes | memoryview,
    supported: dict[int, tuple[int, int]],
    client_host: str = "",
    connection: ConnectionState | None = None,
) -> Request:
    """Parse one frame (without its size prefix). Raises UnsupportedVersion for an api key or
    version not in ``supported`` (api key -> (min, max)), MalformedRequest for bad bytes."""
    api_key, api_version, correlation_id = peek_header(frame)
    low, high = supported.get(api_key, (0, -1))
    schema = request_schema(api_key, api_version) if low <= api_version <= high else None
    if schema is None:
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    header_schema: type = schema.__header_schema__  # (the checker: type[...] not Hashable)
    body: Any  # a kio entity, or the hand-parsed body of a Fetch or a Produce
    try:
        header, used = _reader(header_schema)(frame, 0)
        if api_key == FETCH:  # by hand, checked as it is read (wire.protocol.fetch_request)
            body, end = parse_fetch(bytes(frame), used, api_version)
            if end != len(frame):
                raise MalformedFetch(f"{len(frame) - end} trailing bytes in the frame")
        elif api_key == PRODUCE:  # by hand too; its records are views of the frame
            body, end = parse_produce(frame, used, api_version)
            if end != len(frame):
                raise MalformedProduce(f"{len(frame) - end} trailing bytes in the frame")
        else:
            if schema.__flexible__:
                check_flexible(schema, frame, used)  # before kio reserves memory for arrays
            body, body_size = _reader(schema)(frame, used)
    except (SerialError, KeyError, ValueError, TypeError, struct.error) as exc:
        # kio raises KeyError for an unknown tagged field.
        raise MalformedRequest(f"cannot parse {schema.__name__}: {exc!r}") from exc
    if api_key not in _BY_HAND:
        if used + body_size != len(frame) and api_key not in _TRAILING_BYTES_IGNORED:
            raise MalformedRequest(
                f"{schema.__name__}: {len(frame) - used - body_size} trailing bytes in the frame"
            )
        null = _null_array(body)
        if null is not None:  # kio reads a null array where the schema allows none
            raise MalformedRequest(f"{schema.__name__}: {null} is null")
    return Request(
        api_key,
        api_version,
        correlation_id,
        header.client_id,
        body,
        len(frame),
        client_host,
        connection or ConnectionState(),
    )


@cache
def _nested_fields(cls: type) -> tuple[tuple[str, bool, type | None], ...]:
    """The array and entity fields of a kio entity class: name, whether null is allowed,
    and the entity class of the elements (None for an array of primitives)."""
    found = []
    for f in fields(cls):
        tp, nullable = f.type, False
        if typing.get_origin(tp) in (types.UnionType, typing.Union):
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
            nullable = True
        if typing.get_origin(tp) is tuple:
            element = typing.get_args(tp)[0]
            nested = is_dataclass(element)  # apart: its guard would narrow element to no type
            found.append((f.name, nullable, element if nested else None))
        elif is_dataclass(tp):
            found.append((f.name, nullable, cast(type, tp)))  # a field's type: a class
    return tuple(found)


def _null_array(entity: Any) -> str | None:
    """The first field of ``entity`` (or of the entities in it) that is null though its
    schema says it cannot be, as "Entity.field"; None if there is none."""
    cls: type = type(entity)  # (type[Any], the checker says, is not Hashable)
    for name, nullable, element in _nested_fields(cls):
        value = getattr(entity, name)
        if value is None:
            if not nullable:
                return f"{type(entity).__name__}.{name}"
        elif element is not None:
            for item in value if isinstance(value, tuple) else (value,):
                found = _null_array(item)
                if found is not None:
                    return found
    return None


def encode_response(correlation_id: int, response: Any) -> bytes:
    """A size-prefixed response frame for a kio response entity."""
    return b"".join(response_pieces(correlation_id, response))


def response_pieces(correlation_id: int, response: Any) -> list[bytes]:
    """A size-prefixed response frame for a kio response entity, in pieces to write one
    after the other: a Fetch response's records are not copied into the frame (see
    wire.protocol.fast_responses)."""
    encoder = ENCODERS.get(response.__api_key__)
    if encoder is not None:
        pieces = encoder(correlation_id, response)
        if pieces is not None:
            return pieces
    return [kio_response(correlation_id, response)]


def kio_response(correlation_id: int, response: Any) -> bytes:
    """A size-prefixed response frame written by kio's writers."""
    header_schema = type(response).__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    _writer(header_schema)(buf, header_schema(correlation_id=correlation_id))
    cls: type = type(response)  # (type[Any], the checker says, is not Hashable)
    _writer(cls)(buf, response)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def api_versions_fallback(correlation_id: int, supported: dict[int, tuple[int, int]]) -> bytes:
    """UNSUPPORTED_VERSION for an ApiVersions version we do not know, as a v0 body with our
    ranges, so any client can read it and retry with a version we speak (KIP-511)."""
    body = struct.pack(">ihi", correlation_id, 35, len(supported))
    body += b"".join(struct.pack(">hhh", k, lo, hi) for k, (lo, hi) in sorted(supported.items()))
    return _SIZE.pack(len(body)) + body


def ok_response(schema: type, **values: Any) -> Any:
    """A response of ``schema`` for a request that succeeded as a whole: no throttle, a
    top-level error_code NONE and no error_message (where this version has them), and
    ``values``."""
    return build(
        schema, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, **values
    )


def refused_response(schema: type, code: Any, message: str, **values: Any) -> Any:
    """A response of ``schema`` for a request refused as a whole: no throttle, ``code`` and
    ``message`` in its top-level error fields, and ``values`` (its lists, empty)."""
    return build(
        schema, throttle_time=NO_THROTTLE, error_code=code, error_message=message, **values
    )


def error_response(schema: type, code: Any) -> Any | None:
    """A response of ``schema`` that says only ``code`` in its top-level error_code (every
    other field blank: -1, empty, none), for a request that failed as a whole; None when
    this version has no top-level error_code to say it in."""
    names = _field_names(schema)
    if "error_code" not in names:
        return None
    values: dict[str, Any] = {}
    for f in fields(schema):
        if f.name == "error_code":
            values[f.name] = code
        elif f.default is MISSING and f.default_factory is MISSING:
            values[f.name] = _blank(f.type)
    return schema(**values)


def _blank(kind: Any) -> Any:
    if typing.get_origin(kind) is tuple:
        return ()
    if typing.get_origin(kind) in (types.UnionType, typing.Union):  # X | None
        return None
    if isinstance(kind, type):
        if issubclass(kind, datetime.timedelta):
            return NO_THROTTLE
        if issubclass(kind, bool):
            return False
        if issubclass(kind, int):
            return -1  # Kafka's "none" for ids, generations and offsets
        if issubclass(kind, str):
            return ""
        if issubclass(kind, bytes):
            return b""
        if issubclass(kind, uuid.UUID):
            return uuid.UUID(int=0)
    raise TypeError(f"no blank value for {kind!r}")


async def per_partition(
    topic_class: type,
    topics: Any,
    answer: Callable[[str, Any], Awaitable[Any]],
    name_field: str = "name",
    partitions_field: str = "partitions",
) -> tuple[Any, ...]:
    """One result per topic of a request, each holding ``answer(topic, partition)`` for
    every partition it asked about (in ``partitions_field``), in order."""
    results = []
    for t in topics:
        name = getattr(t, name_field)
        answers = tuple([await answer(name, p) for p in getattr(t, partitions_field)])
        results.append(build(topic_class, **{name_field: name, "partitions": answers}))
    return tuple(results)


def build(cls: type, **values: Any) -> Any:
    """A kio entity from the fields this version has; values for other versions are dropped,
    so one handler serves every version of its API."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def schema_class(schema: type, name: str) -> type:
    """A nested entity class (e.g. MetadataResponseTopic) of the same version as ``schema``."""
    import sys

    return getattr(sys.modules[schema.__module__], name)


def schema_classes(schema: type, *names: str) -> tuple[type, ...]:
    """The nested entity classes ``names`` of the same version as ``schema``, in order."""
    return tuple(schema_class(schema, name) for name in names)
