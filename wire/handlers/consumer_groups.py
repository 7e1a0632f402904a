"""The consumer group protocol's wire face (KIP-848): ConsumerGroupHeartbeat (API 68) and
ConsumerGroupDescribe (API 69); the classic DescribeGroups shows a consumer group with
wire/group_answers.py ``described_as_classic``."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafkaesque.errors import GroupAuthorizationFailed, StorageUnavailable
from kafkaesque.groups.consumer_state import ConsumerGroup, Heartbeat, HeartbeatRefused
from kafkaesque.types import TopicPartition
from wire.authorize import NOT_ASKED, Operation, ResourceType, authorized_operations, check_group
from wire.broker import Broker
from wire.group_answers import by_topic
from wire.protocol.codec import NO_THROTTLE, Request, build, ok_response, schema_class

if TYPE_CHECKING:
    pass

NO_OPERATIONS = NOT_ASKED  # authorized operations of a group in error: none told
CONSUMER_MEMBER = 1  # ConsumerGroupDescribe v1 member_type: a consumer-protocol member


def _ms(value: datetime.timedelta | None) -> int:
    return -1 if value is None else int(value.total_seconds() * 1000)


def _topic_id(group: ConsumerGroup, topic: str) -> uuid.UUID:
    return uuid.UUID(bytes=bytes(group.topics[topic][0]))


async def consumer_group_heartbeat(broker: Broker, request: Request) -> Any:
    body = request.body
    check_group(broker, request, Operation.READ, body.group_id)
    schema = request.response_class
    hb = Heartbeat(
        member_id=body.member_id,
        epoch=body.member_epoch,
        instance_id=body.instance_id,
        rack_id=body.rack_id,
        rebalance_timeout_ms=_ms(body.rebalance_timeout),
        topics=None if body.subscribed_topic_names is None else list(body.subscribed_topic_names),
        regex=getattr(body, "subscribed_topic_regex", None),  # v1+
        assignor=body.server_assignor,
        owned=None
        if body.topic_partitions is None
        else {t.topic_id.bytes: list(t.partitions) for t in body.topic_partitions if t.topic_id},
        client_id=request.client_id or "",
        client_host=request.client_host,
    )
    coordinator = broker.consumer_groups
    if hb.epoch == 0 and await broker.share_groups.exists(body.group_id):
        # A share group has the id: Kafka's "not a consumer group".
        return build(
            schema,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.group_id_not_found,
            error_message=f"Group {body.group_id} is not a consumer group.",
            member_id=None,
            member_epoch=-1,
            heartbeat_interval=datetime.timedelta(0),
        )
    try:
        result = await coordinator.heartbeat(body.group_id, hb, request.api_version)
    except HeartbeatRefused as refused:
        return build(
            schema,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode(int(refused.code)),
            error_message=str(refused),
            member_id=None,
            member_epoch=-1,
            heartbeat_interval=datetime.timedelta(0),
        )
    except StorageUnavailable:
        return build(
            schema,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.coordinator_not_available,
            member_epoch=-1,
            heartbeat_interval=datetime.timedelta(0),
        )
    assignment = None
    if result.assignment is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, p in result.assignment:
            by_topic.setdefault(topic, []).append(p)
        tp_class = schema_class(schema, "TopicPartitions")
        assignment = build(
            schema_class(schema, "Assignment"),
            topic_partitions=tuple(
                build(tp_class, topic_id=uuid.UUID(bytes=result.topic_ids[t]), partitions=tuple(ps))
                for t, ps in by_topic.items()
            ),
        )
    return ok_response(
        schema,
        member_id=result.member_id,
        member_epoch=result.epoch,
        # The group's consumer.heartbeat.interval.ms, else the broker's.
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=assignment,
    )


async def consumer_group_describe(broker: Broker, request: Request) -> Any:
    schema = request.response_class
    group_class = schema_class(schema, "DescribedGroup")
    described = []
    asked = request.body.include_authorized_operations
    for group_id in request.body.group_ids:
        operations = authorized_operations(broker, request, ResourceType.GROUP, group_id, asked)
        try:
            check_group(broker, request, Operation.DESCRIBE, group_id)
            group = await broker.consumer_groups.load(group_id)
            code, message = ErrorCode.none, None
            if group is None:
                code, message = ErrorCode.group_id_not_found, f"Group {group_id} not found."
        except StorageUnavailable:
            group, code, message = None, ErrorCode.coordinator_not_available, None
        except GroupAuthorizationFailed as exc:
            group, code, message = None, ErrorCode.group_authorization_failed, str(exc)
        if group is None:
            described.append(
                build(
                    group_class,
                    error_code=code,
                    error_message=message,
                    group_id=group_id,
                    group_state="Dead",
                    group_epoch=-1,
                    assignment_epoch=-1,
                    assignor_name="",
                    members=(),
                    authorized_operations=NO_OPERATIONS,
                )
            )
            continue
        described.append(
            build(
                group_class,
                error_code=ErrorCode.none,
                error_message=None,
                group_id=group_id,
                group_state=group.state,
                group_epoch=group.epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=group.assignor,
                members=_members(schema, group),
                authorized_operations=operations,
            )
        )
    return build(schema, throttle_time=NO_THROTTLE, groups=tuple(described))


def _members(schema: type, group: ConsumerGroup) -> tuple[Any, ...]:
    member_class = schema_class(schema, "Member")
    assignment_class = schema_class(schema, "Assignment")
    tp_class = schema_class(schema, "TopicPartitions")

    def assignment(partitions: Iterable[TopicPartition]) -> Any:
        return build(
            assignment_class,
            topic_partitions=tuple(
                build(tp_class, topic_id=_topic_id(group, t), topic_name=t, partitions=tuple(ps))
                for t, ps in by_topic(group, partitions).items()
            ),
        )

    return tuple(
        build(
            member_class,
            member_id=m.member_id,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=tuple(m.topics),
            subscribed_topic_regex=m.regex,
            assignment=assignment(m.assigned),
            target_assignment=assignment(group.target.get(m.member_id, ())),
            member_type=CONSUMER_MEMBER,
        )
        for m in group.members.values()
    )
