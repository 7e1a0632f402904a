"""What the group and transaction coordinators' APIs answer alike.

- ``UNAVAILABLE``: a coordinator's answer while it cannot reach the group's state;
- ``restore_first``: the archive restored into an emptied Redis before a group request;
- ``topic_errors``: per-partition error codes of OffsetCommit, OffsetDelete and
  TxnOffsetCommit answers;
- ``described_as_classic``: a KIP-848 consumer group as the classic DescribeGroups shows it;
- ``described_group``: DescribeGroups' entry for a live group of either kind;
- ``by_topic``: a consumer group's partitions grouped by topic, as its answers list them.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v0.data import TopicPartition as AssignedTopic
from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from kafkaesque.errors import StorageUnavailable
from kafkaesque.groups.consumer_state import ConsumerGroup, ConsumerMember
from kafkaesque.types import TopicPartition
from wire.authorize import NOT_ASKED
from wire.broker import Broker
from wire.protocol.codec import Request, build, error_response, schema_class

if TYPE_CHECKING:
    from kio.schema.types import TopicName
    from kio.static.primitive import i32

# What a coordinator says while it cannot reach the group's state (Redis away): clients
# look the coordinator up again and retry.
UNAVAILABLE = ErrorCode.coordinator_not_available


async def restore_first(broker: Broker, request: Request | None = None) -> Any | None:
    """If Redis lost its data and nothing restored it yet, restore it from the archive now:
    a group request answered from the empty Redis would lose the group the archive has
    (its members told to join again, its consumers sent back to their commits or their
    reset policy). One EXISTS while Redis has its data. With ``request``: None, or the
    answer to give while the archive is unreachable (COORDINATOR_NOT_AVAILABLE: retried)."""
    if broker.log.recover and await broker.log.needs_recovery():
        try:
            await broker.log.ensure_recovered()
        except StorageUnavailable:
            if request is None:
                raise
            return error_response(request.response_class, UNAVAILABLE)
    return None


def topic_errors(
    schema: type, api: str, body: Any, errors: dict[tuple[str, int], ErrorCode]
) -> tuple[Any, ...]:
    """The per-topic, per-partition error codes of an OffsetCommit, OffsetDelete or
    TxnOffsetCommit answer, in the request's order."""
    topic_class = schema_class(schema, f"{api}ResponseTopic")
    partition_class = schema_class(schema, f"{api}ResponsePartition")
    return tuple(
        build(
            topic_class,
            name=t.name,
            partitions=tuple(
                build(
                    partition_class,
                    partition_index=p.partition_index,
                    error_code=errors[t.name, p.partition_index],
                )
                for p in t.partitions
            ),
        )
        for t in body.topics
    )


def by_topic(group: ConsumerGroup, partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """``partitions`` of the group's subscribed topics, topic -> its partitions, sorted."""
    out: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        if topic in group.topics:
            out.setdefault(topic, []).append(p)
    return out


def _encoded(entity: Any) -> bytes:
    buf = io.BytesIO()
    buf.write(struct.pack(">h", 0))  # the embedded protocol's version
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


async def described_as_classic(
    broker: Broker,
    group_id: str,
    group_class: type,
    member_class: type,
    operations: int = NOT_ASKED,
) -> Any | None:
    """DescribeGroups' entry for a consumer group (protocol type "consumer", the assignor
    as protocol, members' subscriptions and assignments in the classic embedded format),
    as Kafka shows one; None if ``group_id`` is not a consumer group."""
    group = await broker.consumer_groups.load(group_id)
    if group is None:
        return None
    return described_group(
        group_class,
        member_class,
        group_id,
        group.state,
        "consumer",
        group.assignor,
        (
            (m, _encoded(_subscription(group, m)), _encoded(_assignment(group, m)))
            for m in group.members.values()
        ),
        operations,
    )


def _subscription(group: ConsumerGroup, member: ConsumerMember) -> ConsumerProtocolSubscription:
    return ConsumerProtocolSubscription(
        topics=tuple(sorted(member.subscribed(group.topics))), user_data=None
    )


def _assignment(group: ConsumerGroup, member: ConsumerMember) -> ConsumerProtocolAssignment:
    return ConsumerProtocolAssignment(
        # kio's TopicName and i32 are phantom types of str and int: the values are
        # theirs already (kio checks them as it writes them).
        assigned_partitions=tuple(
            AssignedTopic(
                topic=cast("TopicName", t),
                partitions=cast("tuple[i32, ...]", tuple(ps)),
            )
            for t, ps in by_topic(group, member.assigned).items()
        ),
        user_data=None,
    )


def described_group(
    group_class: type,
    member_class: type,
    group_id: str,
    state: str,
    protocol_type: str,
    protocol: str,
    members: Iterable[tuple[Any, bytes, bytes]],
    operations: int,
) -> Any:
    """DescribeGroups' entry for a live group, classic or KIP-848: ``members`` are (member,
    its metadata, its assignment), each member with the ids and client of both kinds."""
    return build(
        group_class,
        error_code=ErrorCode.none,
        group_id=group_id,
        group_state=state,
        protocol_type=protocol_type,
        protocol_data=protocol,
        members=tuple(
            build(
                member_class,
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=metadata,
                member_assignment=assignment,
            )
            for m, metadata, assignment in members
        ),
        authorized_operations=operations,
    )
