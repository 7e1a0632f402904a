"""The consumer group protocol's wire face (KIP-848): ConsumerGroupHeartbeat (API 68) and
ConsumerGroupDescribe (API 69); the classic DescribeGroups shows a consumer group with
wire/group_answers.py ``described_as_classic``."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafkaesque.errors import Refused, StorageUnavailable
from kafkaesque.groups.consumer_state import ConsumerGroup, Heartbeat
from kafkaesque.types import TopicPartition
from wire.authorize import Operation, check_group
from wire.broker import Broker
from wire.errors import error_code
from wire.group_answers import (
    assignment,
    by_topic,
    describe_groups,
    described_member,
    grouped,
    heartbeat_answer,
    heartbeat_refused,
)
from wire.protocol.codec import Request, schema_class

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse,
        ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse,
    )

CONSUMER_MEMBER = 1  # ConsumerGroupDescribe v1 member_type: a consumer-protocol member


def _ms(value: datetime.timedelta | None) -> int:
    return -1 if value is None else int(value.total_seconds() * 1000)


def _topic_id(group: ConsumerGroup, topic: str) -> uuid.UUID:
    return uuid.UUID(bytes=bytes(group.topics[topic][0]))


async def consumer_group_heartbeat(
    broker: Broker, request: Request[ConsumerGroupHeartbeatRequest]
) -> ConsumerGroupHeartbeatResponse:
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
    if hb.epoch == 0 and await broker.share_groups.exists(body.group_id):
        # A share group has the id: Kafka's "not a consumer group".
        message = f"Group {body.group_id} is not a consumer group."
        return heartbeat_refused(schema, ErrorCode.group_id_not_found, message)
    try:
        result = await broker.consumer_groups.heartbeat(body.group_id, hb, request.api_version)
    except Refused as refused:
        return heartbeat_refused(schema, error_code(refused), str(refused))
    except StorageUnavailable:
        return heartbeat_refused(schema, ErrorCode.coordinator_not_available, None)
    assigned = None
    if result.assignment is not None:
        assigned = assignment(
            schema, grouped(result.assignment), lambda t: uuid.UUID(bytes=result.topic_ids[t])
        )
    # The group's consumer.heartbeat.interval.ms, else the broker's.
    interval = result.heartbeat_interval_ms
    return heartbeat_answer(schema, result.member_id, result.epoch, interval, assigned)


async def consumer_group_describe(
    broker: Broker, request: Request[ConsumerGroupDescribeRequest]
) -> ConsumerGroupDescribeResponse:
    def describe(group: ConsumerGroup) -> tuple[str, tuple[Any, ...]]:
        return group.assignor, _members(request.response_class, group)

    return await describe_groups(broker, request, broker.consumer_groups.load, describe)


def _members(schema: type, group: ConsumerGroup) -> tuple[Any, ...]:
    member_class = schema_class(schema, "Member")

    def assigned(partitions: Iterable[TopicPartition]) -> Any:
        return assignment(schema, by_topic(group, partitions), lambda t: _topic_id(group, t))

    return tuple(
        described_member(
            member_class,
            m,
            assigned(m.assigned),
            instance_id=m.instance_id,
            subscribed_topic_regex=m.regex,
            target_assignment=assigned(group.target.get(m.member_id, ())),
            member_type=CONSUMER_MEMBER,
        )
        for m in group.members.values()
    )
