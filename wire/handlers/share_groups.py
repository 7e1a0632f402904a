"""Share groups' wire face (KIP-932), at Kafka 4.2's versions: ShareGroupHeartbeat (API 76)
and ShareGroupDescribe (77), and the admin APIs on share-partitions' offsets:
DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets
(92). The coordinator is kafkaesque/groups/share/coordinator.py; ShareFetch and
ShareAcknowledge are wire/handlers/share_fetch.py's."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafkaesque.errors import KafkaesqueError, Refused, StorageUnavailable
from kafkaesque.groups.share.state import ShareGroup, ShareHeartbeat
from wire.authorize import Operation, ResourceType, allowed, check_group
from wire.broker import Broker
from wire.errors import error_code
from wire.group_answers import (
    assignment,
    describe_groups,
    described_member,
    grouped,
    heartbeat_answer,
    heartbeat_refused,
    restore_first,
)
from wire.protocol.codec import NO_THROTTLE, Request, build, ok_response, refused_response

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        AlterShareGroupOffsetsRequest,
        AlterShareGroupOffsetsResponse,
        DeleteShareGroupOffsetsRequest,
        DeleteShareGroupOffsetsResponse,
        DescribeShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsResponse,
        ShareGroupDescribeRequest,
        ShareGroupDescribeResponse,
        ShareGroupHeartbeatRequest,
        ShareGroupHeartbeatResponse,
    )

NO_ID = uuid.UUID(int=0)
TOPIC = ResourceType.TOPIC


def _topic_id(group: ShareGroup, topic: str) -> uuid.UUID:
    entry = group.topics.get(topic)
    return uuid.UUID(bytes=bytes(entry[0])) if entry else NO_ID


async def share_group_heartbeat(
    broker: Broker, request: Request[ShareGroupHeartbeatRequest]
) -> ShareGroupHeartbeatResponse:
    body = request.body
    schema = request.response_class
    check_group(broker, request, Operation.READ, body.group_id)
    if (unavailable := await restore_first(broker, request)) is not None:
        return unavailable  # the archive has the group's share-partitions: retried
    topics = body.subscribed_topic_names
    hidden = [t for t in topics or () if not allowed(broker, request, Operation.DESCRIBE, TOPIC, t)]
    if hidden:  # as Kafka: subscribing needs DESCRIBE on every topic
        message = f"Not authorized to describe topics: {', '.join(sorted(hidden))}"
        return heartbeat_refused(schema, ErrorCode.topic_authorization_failed, message)
    hb = ShareHeartbeat(
        member_id=body.member_id,
        epoch=body.member_epoch,
        rack_id=body.rack_id,
        topics=None if topics is None else list(topics),
        client_id=request.client_id or "",
        client_host=request.client_host,
    )
    try:
        result = await broker.share_groups.heartbeat(body.group_id, hb)
    except Refused as refused:
        return heartbeat_refused(schema, error_code(refused), str(refused))
    except StorageUnavailable:
        return heartbeat_refused(schema, ErrorCode.coordinator_not_available, None)
    config = await broker.share_groups.group_config(body.group_id)
    assigned = None
    if result.assignment is not None:
        group = await broker.share_groups.load(body.group_id)
        assigned = assignment(
            schema, grouped(result.assignment), lambda t: _topic_id(group, t) if group else NO_ID
        )
    interval = config.heartbeat_interval_ms
    return heartbeat_answer(schema, result.member_id, result.epoch, interval, assigned)


async def share_group_describe(
    broker: Broker, request: Request[ShareGroupDescribeRequest]
) -> ShareGroupDescribeResponse:
    member_class = request.response_entity("Member")

    def describe(group: ShareGroup) -> tuple[str, tuple[Any, ...]]:
        def topic_id(topic: str) -> uuid.UUID:
            return _topic_id(group, topic)

        return "simple", tuple(
            described_member(
                member_class, m, assignment(request.response_class, grouped(m.assigned), topic_id)
            )
            for m in group.members.values()
        )

    return await describe_groups(broker, request, broker.share_groups.load, describe)


async def _topic_ids(broker: Broker, names: Sequence[str]) -> dict[str, uuid.UUID | None]:
    """Each topic's id, None for a topic that does not exist."""
    out: dict[str, uuid.UUID | None] = {}
    for name in names:
        try:
            out[name] = uuid.UUID(bytes=(await broker.log.topic(name)).topic_id)
        except KafkaesqueError:
            out[name] = None
    return out


async def describe_share_group_offsets(
    broker: Broker, request: Request[DescribeShareGroupOffsetsRequest]
) -> DescribeShareGroupOffsetsResponse:
    group_class, topic_class, part_class = request.response_entities(
        "DescribeShareGroupOffsetsResponseGroup",
        "DescribeShareGroupOffsetsResponseTopic",
        "DescribeShareGroupOffsetsResponsePartition",
    )
    groups = []
    for g in request.body.groups:
        code, message = ErrorCode.none, None
        topics_out: list[Any] = []
        try:
            check_group(broker, request, Operation.DESCRIBE, g.group_id)
            asked: dict[str, list[int]] | None = None  # None: every share-partition
            if g.topics is not None:
                asked = {
                    t.topic_name: list(t.partitions)
                    for t in g.topics
                    if allowed(
                        broker, request, Operation.DESCRIBE, ResourceType.TOPIC, t.topic_name
                    )
                }
            states = await broker.share_groups.offsets(g.group_id, asked)
            names = sorted({t for t, _ in states})
            ids = await _topic_ids(broker, names)
            ends = {}  # (log end, leader epoch) of the partitions with a share-partition
            for tp, state in states.items():
                if state is not None and ids[tp[0]] is not None:
                    partition = await broker.log.state(*tp)
                    ends[tp] = (partition.log_end, partition.leader_epoch)
            for name in names:
                parts = []
                for (t, p), state in sorted(states.items()):
                    if t != name:
                        continue
                    unknown = ids[name] is None
                    lag = -1
                    end, epoch = ends.get((t, p), (-1, -1))
                    if state is not None and end >= 0:
                        lag = max(0, end - state.start - _done_in_flight(state))
                    parts.append(
                        build(
                            part_class,
                            partition_index=p,
                            start_offset=-1 if state is None else state.start,
                            leader_epoch=epoch,
                            lag=lag,
                            error_code=ErrorCode.unknown_topic_or_partition
                            if unknown
                            else ErrorCode.none,
                            error_message=None,
                        )
                    )
                topics_out.append(
                    build(
                        topic_class,
                        topic_name=name,
                        topic_id=ids[name] or NO_ID,
                        partitions=tuple(parts),
                    )
                )
        except KafkaesqueError as exc:  # a Refused among them: its own code
            code, message = error_code(exc), str(exc)
        groups.append(
            build(
                group_class,
                group_id=g.group_id,
                topics=tuple(topics_out),
                error_code=code,
                error_message=message,
            )
        )
    return build(request.response_class, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _done_in_flight(state: Any) -> int:
    """Records between the start and end already acknowledged or archived: not lag."""
    return state.end - state.start - state.acquired - state.available


def _refused(schema: type, refused: Refused) -> Any:
    """Alter/DeleteShareGroupOffsets refused as a whole (another kind of group, members)."""
    return refused_response(schema, error_code(refused), str(refused), responses=())


async def alter_share_group_offsets(
    broker: Broker, request: Request[AlterShareGroupOffsetsRequest]
) -> AlterShareGroupOffsetsResponse:
    body = request.body
    schema = request.response_class
    topic_class, part_class = request.response_entities(
        "AlterShareGroupOffsetsResponseTopic", "AlterShareGroupOffsetsResponsePartition"
    )
    check_group(broker, request, Operation.READ, body.group_id)
    ids = await _topic_ids(broker, [t.topic_name for t in body.topics])
    wanted: dict[tuple[str, int], int] = {}
    errors: dict[tuple[str, int], ErrorCode] = {}
    for t in body.topics:
        for p in t.partitions:
            tp = (t.topic_name, p.partition_index)
            if not allowed(broker, request, Operation.READ, ResourceType.TOPIC, t.topic_name):
                errors[tp] = ErrorCode.topic_authorization_failed
            elif ids[t.topic_name] is None or p.partition_index < 0:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            elif p.partition_index >= (await broker.log.topic(t.topic_name)).partitions:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            elif p.start_offset < 0:
                errors[tp] = ErrorCode.invalid_request
            else:
                wanted[tp] = p.start_offset
    try:
        await broker.share_groups.alter_offsets(body.group_id, wanted)
    except Refused as refused:
        return _refused(schema, refused)
    responses = tuple(
        build(
            topic_class,
            topic_name=t.topic_name,
            topic_id=ids[t.topic_name] or NO_ID,
            partitions=tuple(
                build(
                    part_class,
                    partition_index=p.partition_index,
                    error_code=errors.get((t.topic_name, p.partition_index), ErrorCode.none),
                    error_message=None,
                )
                for p in t.partitions
            ),
        )
        for t in body.topics
    )
    return ok_response(schema, responses=responses)


async def delete_share_group_offsets(
    broker: Broker, request: Request[DeleteShareGroupOffsetsRequest]
) -> DeleteShareGroupOffsetsResponse:
    body = request.body
    schema = request.response_class
    topic_class = request.response_entity("DeleteShareGroupOffsetsResponseTopic")
    check_group(broker, request, Operation.DELETE, body.group_id)
    names = [t.topic_name for t in body.topics]
    ids = await _topic_ids(broker, names)
    errors: dict[str, ErrorCode] = {}
    for name in names:
        if not allowed(broker, request, Operation.READ, ResourceType.TOPIC, name):
            errors[name] = ErrorCode.topic_authorization_failed
        elif ids[name] is None:
            errors[name] = ErrorCode.unknown_topic_or_partition
    try:
        await broker.share_groups.delete_offsets(
            body.group_id, [n for n in names if n not in errors]
        )
    except Refused as refused:
        return _refused(schema, refused)
    responses = tuple(
        build(
            topic_class,
            topic_name=name,
            topic_id=ids[name] or NO_ID,
            error_code=errors.get(name, ErrorCode.none),
            error_message=None,
        )
        for name in names
    )
    return ok_response(schema, responses=responses)
