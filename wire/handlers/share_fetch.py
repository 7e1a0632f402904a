"""ShareFetch (API 78) and ShareAcknowledge (79), v1-2 as Kafka 4.2 offers them (KIP-932):
records acquired for a member of a share group, with share sessions, and their
acknowledgements. What happens to records is kafkaesque/groups/share/fetch.py's; this
translates topic ids, sessions, ACLs (READ on the group, READ on each topic) and errors."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import Records

from kafkaesque.errors import Code, GroupAuthorizationFailed, Refused
from kafkaesque.groups.share.config import ShareGroupConfig
from kafkaesque.groups.share.fetch import Acquired
from kafkaesque.groups.share.sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    ShareSession,
    ShareSessions,
)
from kafkaesque.types import TopicPartition
from wire.authorize import Operation, ResourceType, allowed, check_group
from wire.broker import Broker
from wire.errors import error_code
from wire.group_answers import restore_first
from wire.protocol.codec import NO_THROTTLE, Request, build, schema_class

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        ShareAcknowledgeRequest,
        ShareAcknowledgeResponse,
        ShareFetchRequest,
        ShareFetchResponse,
    )

FIRST_RENEW = 2  # the first ShareFetch/ShareAcknowledge version with RENEW acknowledgements
RECORD_LIMIT = 1  # ShareFetch v2's share_acquire_mode: at most max_records (0: whole batches)
NO_ID = uuid.UUID(int=0)
Acks = dict[TopicPartition, list[tuple[int, int, Sequence[int]]]]
AckOutcome = tuple[ErrorCode, str | None]  # an acknowledgement's error code and message


def _answer(
    request: Request,
    code: ErrorCode,
    message: str | None,
    lock_ms: int = 0,
    responses: Sequence[Any] = (),
) -> Any:
    """A ShareFetch or ShareAcknowledge answer: ``code`` for the request as a whole (with
    no ``responses`` when it failed) and the group's acquisition lock duration."""
    return build(
        request.response_class,
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms),
        responses=tuple(responses),
        node_endpoints=(),
    )


def _unauthorized(broker: Broker, request: Request, group_id: str) -> Any | None:
    """The answer without READ on the group, else None."""
    try:
        check_group(broker, request, Operation.READ, group_id)
    except GroupAuthorizationFailed as exc:
        return _answer(request, ErrorCode.group_authorization_failed, str(exc))
    return None


class _Topics:
    """The request's topic ids as names (and back), each resolved once."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.names: dict[uuid.UUID, str | None] = {}
        self.ids: dict[str, uuid.UUID] = {}

    async def name(self, topic_id: uuid.UUID | None) -> str | None:
        if topic_id is None:
            return None
        if topic_id not in self.names:
            name = await self.broker.topic_ids.name(topic_id.bytes)
            self.names[topic_id] = name
            if name is not None:
                self.ids[name] = topic_id
        return self.names[topic_id]

    async def id_of(self, name: str) -> uuid.UUID:
        if name not in self.ids:
            self.ids[name] = uuid.UUID(bytes=(await self.broker.log.topic(name)).topic_id)
        return self.ids[name]


async def _acks(
    topics: _Topics, entries: Iterable[Any], unknown: dict[tuple[uuid.UUID, int], ErrorCode]
) -> Acks:
    """The acknowledgement batches by share-partition (unknown topic ids noted)."""
    acks: Acks = {}
    for t in entries:
        name = await topics.name(t.topic_id)
        for p in t.partitions:
            if not p.acknowledgement_batches:
                continue
            if name is None:
                unknown[(t.topic_id or NO_ID, p.partition_index)] = ErrorCode.unknown_topic_id
                continue
            acks[(name, p.partition_index)] = [
                (b.first_offset, b.last_offset, list(b.acknowledge_types))
                for b in p.acknowledgement_batches
            ]
    return acks


async def _acknowledge(
    broker: Broker,
    request: Request,
    group_id: str,
    member_id: str,
    acks: Acks,
    config: ShareGroupConfig,
) -> dict[TopicPartition, AckOutcome]:
    """Each share-partition's acknowledgement outcome; READ on each topic required."""
    out: dict[TopicPartition, AckOutcome] = {}
    permitted: Acks = {}
    for tp, batches in acks.items():
        if allowed(broker, request, Operation.READ, ResourceType.TOPIC, tp[0]):
            permitted[tp] = batches
        else:
            out[tp] = (ErrorCode.topic_authorization_failed, None)
    # RENEW (type 4) is ShareFetch/ShareAcknowledge v2's, where the group allows it.
    if request.api_version < FIRST_RENEW:
        config = dataclasses.replace(config, renew_acknowledge=False)
    done = await broker.share_fetcher.acknowledge(group_id, member_id, permitted, config)
    for tp, (code, message) in done.items():
        out[tp] = (ErrorCode(code), message or None)
    return out


def _leader(schema: type, epoch: int) -> Any:
    return build(schema_class(schema, "LeaderIdAndEpoch"), leader_id=-1, leader_epoch=epoch)


def _session(
    sessions: ShareSessions,
    group_id: str,
    member_id: str,
    epoch: int,
    wanted: list[TopicPartition],
    forgotten: list[TopicPartition],
    acks: Acks,
) -> ShareSession:
    """The share session a ShareFetch opens (epoch 0), continues or closes (-1), as
    Kafka's SharePartitionManager.newContext; raises Refused."""
    if epoch == INITIAL_EPOCH:
        if acks:
            raise Refused.invalid("acknowledgements in a share fetch opening a session")
        return sessions.open(group_id, member_id, wanted)
    if epoch == FINAL_EPOCH and wanted and not acks:
        raise Refused.invalid("partitions to fetch in a share fetch closing its session")
    session = sessions.find(group_id, member_id, epoch)
    if epoch != FINAL_EPOCH:
        session.update(wanted, forgotten)
    return session


def _partition(schema: type, got: Acquired, code: ErrorCode, ack: AckOutcome, index: int) -> Any:
    """One partition's PartitionData: its records and acquired ranges, its fetch error
    (``code``) and its acknowledgement's outcome."""
    return build(
        schema_class(schema, "PartitionData"),
        partition_index=index,
        error_code=code,
        error_message=None if got.error is None else str(got.error),
        acknowledge_error_code=int(ack[0]),
        acknowledge_error_message=ack[1],
        current_leader=_leader(schema, got.leader_epoch),
        records=Records(b"".join(got.batches)),
        acquired_records=tuple(
            build(
                schema_class(schema, "AcquiredRecords"),
                first_offset=lo,
                last_offset=hi,
                delivery_count=d,
            )
            for lo, hi, d in got.runs
        ),
    )


async def share_fetch(broker: Broker, request: Request[ShareFetchRequest]) -> ShareFetchResponse:
    body = request.body
    schema = request.response_class
    group_id, member_id, epoch = body.group_id or "", body.member_id or "", body.share_session_epoch
    if (unauthorized := _unauthorized(broker, request, group_id)) is not None:
        return unauthorized
    if not group_id or not member_id:
        return _answer(request, ErrorCode.invalid_request, "GroupId and MemberId are required")
    if (unavailable := await restore_first(broker, request)) is not None:
        return unavailable  # Redis lost its data and the archive is away: retried
    config = await broker.share_groups.group_config(group_id)
    lock_ms = config.record_lock_duration_ms
    topics = _Topics(broker)
    unknown: dict[tuple[uuid.UUID, int], ErrorCode] = {}
    wanted: list[TopicPartition] = []
    for t in body.topics:
        name = await topics.name(t.topic_id)
        for p in t.partitions:
            if name is None:
                unknown[(t.topic_id or NO_ID, p.partition_index)] = ErrorCode.unknown_topic_id
            else:
                wanted.append((name, p.partition_index))
    forgotten: list[TopicPartition] = []
    for f in body.forgotten_topics_data:
        name = await topics.name(f.topic_id)
        if name is not None:
            forgotten += [(name, index) for index in f.partitions]
    acks = await _acks(topics, body.topics, unknown)
    sessions = broker.share_fetcher.sessions
    try:
        session = _session(sessions, group_id, member_id, epoch, wanted, forgotten, acks)
    except Refused as refused:
        return _answer(request, error_code(refused), str(refused), lock_ms)
    # The acknowledgements go to Redis first and the fetch's first scripts right behind
    # them, in one round trip (the shared connection keeps their order; were it not kept,
    # a fetch would only see fewer records to acquire).
    acking = asyncio.ensure_future(_acknowledge(broker, request, group_id, member_id, acks, config))
    results: dict[TopicPartition, Acquired] = {}
    denied: set[TopicPartition] = set()
    try:
        if epoch == FINAL_EPOCH:
            await asyncio.wait([acking])  # acknowledged first, then the rest released
            sessions.close(session)
            await broker.share_fetcher.release(session)
        elif not getattr(body, "is_renew_ack", False):  # v2: a renewing request fetches nothing
            denied = {
                tp
                for tp in session.partitions
                if not allowed(broker, request, Operation.READ, ResourceType.TOPIC, tp[0])
            }
            results = await broker.share_fetcher.fetch(
                group_id,
                member_id,
                [tp for tp in session.partitions if tp not in denied],
                int(body.max_wait.total_seconds() * 1000),
                body.min_bytes,
                body.max_bytes,
                body.max_records if body.max_records > 0 else 500,
                config,
                strict=getattr(body, "share_acquire_mode", 0) == RECORD_LIMIT,
            )
            results.update((tp, Acquired()) for tp in denied)
    finally:
        acked = await acking
    # Answered: every partition of a new session; else those with records, an error, a
    # refusal or an acknowledgement outcome.
    by_topic: dict[str, list[Any]] = {}
    for tp in dict.fromkeys([*results, *acked]):
        got = results.get(tp, Acquired())
        if not (epoch == INITIAL_EPOCH or got.runs or got.error or tp in acked or tp in denied):
            continue
        code = ErrorCode.none if got.error is None else error_code(got.error)
        if tp in denied:
            code = ErrorCode.topic_authorization_failed
        ack = acked.get(tp, (ErrorCode.none, None))
        by_topic.setdefault(tp[0], []).append(_partition(schema, got, code, ack, tp[1]))
    topic_class = request.response_entity("ShareFetchableTopicResponse")
    responses = [
        build(topic_class, topic_id=await topics.id_of(topic), partitions=tuple(parts))
        for topic, parts in by_topic.items()
    ]
    for (topic_id, index), code in unknown.items():
        refusal = _partition(schema, Acquired(), code, (code, None), index)
        responses.append(build(topic_class, topic_id=topic_id, partitions=(refusal,)))
    return _answer(request, ErrorCode.none, None, lock_ms, responses)


async def share_acknowledge(
    broker: Broker, request: Request[ShareAcknowledgeRequest]
) -> ShareAcknowledgeResponse:
    body = request.body
    schema = request.response_class
    group_id, member_id, epoch = body.group_id or "", body.member_id or "", body.share_session_epoch
    if (unauthorized := _unauthorized(broker, request, group_id)) is not None:
        return unauthorized
    config = await broker.share_groups.group_config(group_id)
    lock_ms = config.record_lock_duration_ms
    sessions = broker.share_fetcher.sessions
    try:
        if epoch == INITIAL_EPOCH:
            raise Refused(
                Code.INVALID_SHARE_SESSION_EPOCH,
                "a share acknowledgement cannot open a share session",
            )
        session = sessions.find(group_id, member_id, epoch)
    except Refused as refused:
        return _answer(request, error_code(refused), str(refused), lock_ms)
    topics = _Topics(broker)
    unknown: dict[tuple[uuid.UUID, int], ErrorCode] = {}
    acks = await _acks(topics, body.topics, unknown)
    acked = await _acknowledge(broker, request, group_id, member_id, acks, config)
    if epoch == FINAL_EPOCH:
        sessions.close(session)
        await broker.share_fetcher.release(session)
    part_class, topic_class = request.response_entities(
        "PartitionData", "ShareAcknowledgeTopicResponse"
    )
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for (topic, p), (code, message) in acked.items():
        by_topic.setdefault(await topics.id_of(topic), []).append(
            build(
                part_class,
                partition_index=p,
                error_code=code,
                error_message=message,
                current_leader=_leader(schema, -1),
            )
        )
    for (topic_id, p), code in unknown.items():
        by_topic.setdefault(topic_id, []).append(
            build(
                part_class, partition_index=p, error_code=code, current_leader=_leader(schema, -1)
            )
        )
    responses = [
        build(topic_class, topic_id=t, partitions=tuple(parts)) for t, parts in by_topic.items()
    ]
    return _answer(request, ErrorCode.none, None, lock_ms, responses)
