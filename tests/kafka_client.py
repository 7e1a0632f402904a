"""The tests' raw Kafka client, built on kio: for tests that need exact control of what goes
on the wire (retried batches, bad input, group rounds step by step) or that read answers
field by field.

Requests are kio entities built from keyword arguments (``request``); they are framed with
the header version their schema names and their answers are decoded and checked (the
correlation id, no bytes left over). Two flavours share that code: ``Connection``, a blocking
socket for tests against a server process, with one method per request the tests send, and
``AsyncConnection``, on asyncio streams, for tests against an in-process broker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import importlib
import io
import itertools
import socket
import struct
import sys
import types
import typing
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer

TIMEOUT = 10.0  # seconds for any socket operation
CLIENT_ID = "tests"
_SIZE = struct.Struct(">i")
_VERSION = struct.Struct(">h")

# -- building requests ---------------------------------------------------------------------


def request(api_key: int, version: int, **fields: Any) -> Any:
    """The request ``api_key`` of ``version`` with these fields. Nested entities may be
    given as dicts (a sequence of dicts for an array), durations as integer milliseconds.
    Fields that only other versions of the API have are left out, so one call serves several
    versions; a name no version has is an error."""
    return _build(load_request_schema(api_key, version), fields)


def _build(cls: type, values: dict[str, Any]) -> Any:
    own = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(values) - _field_names(cls.__api_key__, cls.__name__)
    if unknown:
        raise TypeError(f"no version of {cls.__name__} has the fields {sorted(unknown)}")
    return cls(**{name: _value(own[name], v) for name, v in values.items() if name in own})


@cache
def _field_names(api_key: int, entity: str) -> frozenset[str]:
    """The fields entity ``entity`` of request ``api_key`` has in any version."""
    names: set[str] = set()
    for version in schema_name_map[api_key_map[api_key]]:
        module = sys.modules[load_request_schema(api_key, version).__module__]
        cls = getattr(module, entity, None)
        if cls is not None:
            names.update(f.name for f in dataclasses.fields(cls))
    return frozenset(names)


def _value(f: dataclasses.Field, value: Any) -> Any:
    nested, many = _nested(f.type)
    if value is None:
        return None
    if many:
        return tuple(_entity(nested, v) if nested else v for v in value)
    if nested:
        return _entity(nested, value)
    if f.metadata.get("kafka_type", "").startswith("timedelta") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    return value


def _entity(cls: type, value: Any) -> Any:
    return _build(cls, value) if isinstance(value, dict) else value


def _nested(tp: Any) -> tuple[type | None, bool]:
    """The nested entity class of a field's type (or None), and whether it is an array."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return _nested(next(a for a in args if a is not type(None)))
    if origin is tuple:
        return _nested(args[0])[0], True
    return (tp if dataclasses.is_dataclass(tp) else None), False


def metadata_request(topics: list[str] | None, auto_create: bool = False, version: int = 4) -> Any:
    """Metadata of the named topics (None: every topic)."""
    return request(
        3,
        version,
        topics=None if topics is None else [{"name": t} for t in topics],
        allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=False,
        **({"include_cluster_authorized_operations": False} if 8 <= version <= 10 else {}),
    )


def produce_request(
    topic: str,
    batches: dict[int, bytes],
    acks: int = -1,
    timeout_ms: int = 10_000,
    version: int = 7,
) -> Any:
    """Produce ``batches`` (partition -> record batches) to one topic."""
    partitions = [{"index": p, "records": r} for p, r in batches.items()]
    return request(
        0,
        version,
        acks=acks,
        timeout=timeout_ms,
        topic_data=[{"name": topic, "partition_data": partitions}],
    )


def fetch_request(
    topic: str,
    offsets: dict[int, int],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 1 << 20,
    partition_max_bytes: int = 1 << 20,
    current_leader_epoch: int = -1,
    version: int = 11,
) -> Any:
    """Fetch one topic's partitions from ``offsets`` (partition -> offset)."""
    partitions = [
        {
            "partition": p,
            "current_leader_epoch": current_leader_epoch,
            "fetch_offset": o,
            "partition_max_bytes": partition_max_bytes,
        }
        for p, o in offsets.items()
    ]
    return request(
        1,
        version,
        max_wait=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        topics=[{"topic": topic, "partitions": partitions}],
        forgotten_topics_data=(),
    )


def list_offsets_request(
    topic: str,
    partition: int,
    timestamp: int,
    current_leader_epoch: int = -1,
    version: int = 2,
    timeout_ms: int = 10_000,
) -> Any:
    """The offset of one partition at ``timestamp``: -1 latest, -2 earliest, -3 max
    timestamp, -4 earliest local, -5 latest tiered, or a time; v10+ within ``timeout_ms``."""
    wanted = {
        "partition_index": partition,
        "current_leader_epoch": current_leader_epoch,
        "timestamp": timestamp,
    }
    return request(
        2,
        version,
        replica_id=-1,
        isolation_level=0,
        topics=[{"name": topic, "partitions": [wanted]}],
        timeout=timeout_ms,
    )


def create_topics_request(
    *topics: dict[str, Any], validate_only: bool = False, version: int = 3
) -> Any:
    """CreateTopics of ``topics``: CreatableTopic fields, with no assignments or configs
    unless given."""
    creatable = [{"assignments": (), "configs": (), **t} for t in topics]
    return request(19, version, topics=creatable, timeout=10_000, validate_only=validate_only)


# -- the "consumer" protocol's embedded bytes ----------------------------------------------


def subscription(topics: list[str], user_data: bytes = b"") -> bytes:
    """A JoinGroup member's metadata: ConsumerProtocolSubscription v0."""
    buf = io.BytesIO()
    buf.write(_VERSION.pack(0))
    entity = ConsumerProtocolSubscription(topics=tuple(topics), user_data=user_data)
    entity_writer(ConsumerProtocolSubscription)(buf, entity)
    return buf.getvalue()


def assignment_bytes(assigned: dict[str, list[int]], version: int = 0) -> bytes:
    """A SyncGroup assignment: ConsumerProtocolAssignment, no user data."""
    cls = _assignment_class(version)
    module = sys.modules[cls.__module__]
    entity = cls(
        assigned_partitions=tuple(
            module.TopicPartition(topic=t, partitions=tuple(ps)) for t, ps in assigned.items()
        )
    )
    buf = io.BytesIO()
    buf.write(_VERSION.pack(version))
    entity_writer(cls)(buf, entity)
    return buf.getvalue()


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """The topics and partitions of a ConsumerProtocolAssignment (any version)."""
    (version,) = _VERSION.unpack_from(data)
    entity, _ = entity_reader(_assignment_class(version))(data, _VERSION.size)
    return {t.topic: list(t.partitions) for t in entity.assigned_partitions}


def _assignment_class(version: int) -> type:
    module = importlib.import_module(f"kio.schema.consumer_protocol_assignment.v{version}")
    return module.ConsumerProtocolAssignment


# -- framing -------------------------------------------------------------------------------


def encode_request(req: Any, correlation_id: int, client_id: str | None = CLIENT_ID) -> bytes:
    """A size-prefixed request frame, with the header version of the request's schema."""
    header_cls = type(req).__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    header = header_cls(
        request_api_key=req.__api_key__,
        request_api_version=req.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    entity_writer(header_cls)(buf, header)
    entity_writer(type(req))(buf, req)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(api_key: int, version: int, frame: bytes, correlation_id: int) -> Any:
    """The response in ``frame`` (without its size prefix), checked to answer
    ``correlation_id`` and to end where the frame ends."""
    schema = load_response_schema(api_key, version)
    header, used = entity_reader(schema.__header_schema__)(frame, 0)
    assert header.correlation_id == correlation_id, (header, correlation_id)
    body, size = entity_reader(schema)(frame, used)
    assert used + size == len(frame), f"{len(frame) - used - size} bytes after the response"
    return body


def expects_response(req: Any) -> bool:
    """False for a produce with acks=0, which Kafka never answers."""
    return getattr(req, "acks", None) != 0


def parse_address(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


# -- the blocking flavour ------------------------------------------------------------------


def _only(items: Any) -> Any:
    (item,) = items
    return item


class Connection:
    """One blocking connection. ``request`` sends and waits for the answer;
    ``send_request`` and ``read_response`` split that, to keep requests waiting."""

    def __init__(
        self, bootstrap: str, timeout: float = TIMEOUT, client_id: str | None = CLIENT_ID
    ) -> None:
        self.sock = socket.create_connection(parse_address(bootstrap), timeout=timeout)
        self.client_id = client_id
        self._correlation = itertools.count(1)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_exactly(self, n: int) -> bytes | None:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(n - got)
            if not chunk:
                return None
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def read_frame(self) -> bytes | None:
        """One response frame without its size prefix; None when the server closed."""
        prefix = self._read_exactly(4)
        if prefix is None:
            return None
        (size,) = _SIZE.unpack(prefix)
        return self._read_exactly(size)

    def closed_by_server(self) -> bool:
        """True when the server closes the connection (EOF or reset) before sending anything."""
        try:
            data = self.sock.recv(1)
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        return data == b""

    def send_request(self, req: Any) -> int:
        """Send ``req``; returns its correlation id."""
        correlation_id = next(self._correlation)
        self.send(encode_request(req, correlation_id, self.client_id))
        return correlation_id

    def read_response(self, req: Any, correlation_id: int) -> Any:
        """The answer to ``req``, sent earlier with ``send_request``."""
        frame = self.read_frame()
        if frame is None:
            raise ConnectionError(f"the server closed the connection instead of answering {req}")
        return decode_response(req.__api_key__, req.__version__, frame, correlation_id)

    def request(self, req: Any) -> Any:
        """The answer to ``req``; None for a request Kafka does not answer (acks=0)."""
        correlation_id = self.send_request(req)
        return self.read_response(req, correlation_id) if expects_response(req) else None

    # -- topics and records

    def api_versions(self, version: int = 0) -> Any:
        return self.request(
            request(18, version, client_software_name="tests", client_software_version="0.1")
        )

    def metadata(self, topics: list[str] | None, auto_create: bool = False) -> Any:
        return self.request(metadata_request(topics, auto_create))

    def create_topic(self, topic: str, partitions: int = 1) -> Any:
        """The CreatableTopicResult."""
        req = create_topics_request(
            {"name": topic, "num_partitions": partitions, "replication_factor": 1}
        )
        return _only(self.request(req).topics)

    def init_producer_id(self) -> tuple[int, int]:
        """A new idempotent producer's id and epoch."""
        resp = self.request(request(22, 0, transactional_id=None, transaction_timeout=60_000))
        assert resp.error_code == ErrorCode.none, resp
        return resp.producer_id, resp.producer_epoch

    def produce(self, topic: str, partition: int, records: bytes) -> Any:
        """The PartitionProduceResponse of a one-partition produce."""
        resp = self.request(produce_request(topic, {partition: records}))
        return _only(_only(resp.responses).partition_responses)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20) -> Any:
        """The PartitionData of a one-partition fetch that does not wait."""
        req = fetch_request(
            topic,
            {partition: offset},
            min_bytes=0,
            max_bytes=max_bytes,
            partition_max_bytes=max_bytes,
        )
        return _only(_only(self.request(req).responses).partitions)

    def list_offset(self, topic: str, partition: int, timestamp: int = -1) -> Any:
        """The ListOffsetsPartitionResponse for latest (-1), earliest (-2) or a time."""
        resp = self.request(list_offsets_request(topic, partition, timestamp))
        return _only(_only(resp.topics).partitions)

    # -- consumer groups

    def join_group(self, group: str, member_id: str = "", **options: Any) -> Any:
        """JoinGroup (options: see ``join_request``); waits for the answer."""
        return self.request(join_request(group, member_id, **options))

    def join_new_member(self, group: str, topics: list[str]) -> Any:
        """JoinGroup v5 twice (MEMBER_ID_REQUIRED, then with the id); the second answer."""
        first = self.join_group(group, topics=topics)
        assert first.error_code == ErrorCode.member_id_required, first
        second = self.join_group(group, first.member_id, topics=topics)
        assert second.error_code == ErrorCode.none, second
        return second

    def sync_group(
        self,
        group: str,
        generation: int,
        member_id: str,
        assignments: dict[str, bytes],
        instance_id: str | None = None,
    ) -> Any:
        return self.request(
            request(
                14,
                3,
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=instance_id,
                assignments=[{"member_id": m, "assignment": a} for m, a in assignments.items()],
            )
        )

    def heartbeat(
        self, group: str, generation: int, member_id: str, instance_id: str | None = None
    ) -> ErrorCode:
        return self.request(
            request(
                12,
                3,
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=instance_id,
            )
        ).error_code

    def leave_group(self, group: str, member_id: str, instance_id: str | None = None) -> Any:
        member = {"member_id": member_id, "group_instance_id": instance_id}
        return self.request(request(13, 3, group_id=group, members=[member]))

    def offset_commit(
        self,
        group: str,
        generation: int,
        member_id: str,
        offsets: dict[tuple[str, int], tuple[int, str | None]],
        version: int = 3,
    ) -> dict[tuple[str, int], ErrorCode]:
        """Commit (topic, partition) -> (offset, metadata); the error of each partition."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (t, p), (offset, metadata) in offsets.items():
            by_topic.setdefault(t, []).append(
                {"partition_index": p, "committed_offset": offset, "committed_metadata": metadata}
            )
        resp = self.request(
            request(
                8,
                version,
                group_id=group,
                generation_id_or_member_epoch=generation,
                member_id=member_id,
                topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            )
        )
        return {
            (t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions
        }

    def offset_fetch(
        self, group: str, wanted: dict[str, list[int]] | None = None
    ) -> dict[tuple[str, int], tuple[int, str | None, ErrorCode]]:
        """(topic, partition) -> (offset, metadata, error); ``wanted`` None: all."""
        topics = (
            None
            if wanted is None
            else [{"name": t, "partition_indexes": ps} for t, ps in wanted.items()]
        )
        resp = self.request(request(9, 3, group_id=group, topics=topics))
        assert resp.error_code == ErrorCode.none, resp
        return {
            (t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
            for t in resp.topics
            for p in t.partitions
        }

    def describe_group(self, group: str) -> Any:
        req = request(15, 4, groups=(group,), include_authorized_operations=False)
        return _only(self.request(req).groups)

    def list_groups(self) -> dict[str, str]:
        """Group id -> protocol type."""
        resp = self.request(request(16, 2))
        assert resp.error_code == ErrorCode.none, resp
        return {g.group_id: g.protocol_type for g in resp.groups}

    def delete_groups(self, groups: list[str]) -> dict[str, ErrorCode]:
        resp = self.request(request(42, 1, groups_names=tuple(groups)))
        return {r.group_id: r.error_code for r in resp.results}


def join_request(
    group: str,
    member_id: str = "",
    *,
    topics: list[str] | None = None,
    version: int = 5,
    session_ms: int = 10_000,
    rebalance_ms: int = 10_000,
    instance_id: str | None = None,
) -> Any:
    """A JoinGroup request of the "consumer" protocol with one assignor, "range"."""
    return request(
        11,
        version,
        group_id=group,
        session_timeout=session_ms,
        rebalance_timeout=rebalance_ms,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": subscription(topics or [])}],
    )


# -- the asyncio flavour -------------------------------------------------------------------


class AsyncConnection:
    """One connection on asyncio streams, with the framing of ``Connection``."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client_id: str | None = CLIENT_ID,
    ) -> None:
        self.reader, self.writer = reader, writer
        self.client_id = client_id
        self._correlation = itertools.count(1)

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1") -> AsyncConnection:
        return cls(*await asyncio.open_connection(host, port))

    async def close(self) -> None:
        self.writer.close()

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_frame(self, timeout: float = TIMEOUT) -> bytes:
        prefix = await asyncio.wait_for(self.reader.readexactly(4), timeout)
        return await asyncio.wait_for(self.reader.readexactly(_SIZE.unpack(prefix)[0]), timeout)

    async def closed_by_server(self, timeout: float = 5) -> bool:
        """True when the server closes the connection without sending anything more."""
        try:
            return await asyncio.wait_for(self.reader.read(), timeout) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    async def send_request(self, req: Any) -> int:
        correlation_id = next(self._correlation)
        await self.send(encode_request(req, correlation_id, self.client_id))
        return correlation_id

    async def read_response(self, req: Any, correlation_id: int) -> Any:
        frame = await self.read_frame()
        return decode_response(req.__api_key__, req.__version__, frame, correlation_id)

    async def request(self, req: Any) -> Any:
        """The answer to ``req``; None for a request Kafka does not answer (acks=0)."""
        correlation_id = await self.send_request(req)
        if not expects_response(req):
            return None
        return await self.read_response(req, correlation_id)
