"""What the group and transaction coordinators' APIs answer alike.

- ``UNAVAILABLE``: a coordinator's answer while it cannot reach the group's state;
- ``restore_first``: the archive restored into an emptied Redis before a group request;
- ``topic_errors``: per-partition error codes of OffsetCommit, OffsetDelete and
  TxnOffsetCommit answers;
- ``described_as_classic``: a KIP-848 consumer group as the classic DescribeGroups shows it;
- ``described_group``: DescribeGroups' entry for a live group of either kind;
- ``by_topic``: a consumer group's partitions grouped by topic, as its answers list them.

KIP-848 consumer groups and KIP-932 share groups answer their heartbeats and describes
alike: ``heartbeat_answer``, ``heartbeat_refused``, ``assignment`` (with ``grouped``),
``described_member`` and ``describe_groups`` (the per-group lookup, errors included).
"""

from __future__ import annotations

import datetime
import io
import struct
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v0.data import TopicPartition as AssignedTopic
from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from kafkaesque.errors import GroupAuthorizationFailed, StorageUnavailable
from kafkaesque.groups.consumer_state import ConsumerGroup, ConsumerMember
from kafkaesque.types import TopicPartition
from wire.authorize import NOT_ASKED, Operation, ResourceType, authorized_operations, check_group
from wire.broker import Broker
from wire.protocol.codec import (
    NO_THROTTLE,
    Request,
    build,
    error_response,
    ok_response,
    schema_classes,
)

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
    topic_class, partition_class = schema_classes(
        schema, f"{api}ResponseTopic", f"{api}ResponsePartition"
    )
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


# -- KIP-848 consumer groups and KIP-932 share groups ---------------------------------------


class LiveGroup(Protocol):
    """What a describe says of a KIP-848 or share group besides its members."""

    @property
    def state(self) -> str: ...

    epoch: int
    assignment_epoch: int


GroupT = TypeVar("GroupT", bound=LiveGroup)


def grouped(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """``partitions`` by topic, in the order given."""
    out: dict[str, list[int]] = {}
    for topic, p in partitions:
        out.setdefault(topic, []).append(p)
    return out


def assignment(
    schema: type, by_topic: Mapping[str, Sequence[int]], topic_id: Callable[[str], uuid.UUID]
) -> Any:
    """The Assignment entry of ``schema``'s version (a heartbeat's answer, a described
    member): each topic's partitions with its id, and its name where the version has one."""
    assignment_class, tp_class = schema_classes(schema, "Assignment", "TopicPartitions")
    return build(
        assignment_class,
        topic_partitions=tuple(
            build(tp_class, topic_id=topic_id(t), topic_name=t, partitions=tuple(ps))
            for t, ps in by_topic.items()
        ),
    )


def heartbeat_answer(
    schema: type, member_id: str, epoch: int, interval_ms: int, assigned: Any | None
) -> Any:
    """A heartbeat's answer: the member, its epoch, when to beat next and its new
    ``assigned`` (an ``assignment``; None: unchanged)."""
    return ok_response(
        schema,
        member_id=member_id,
        member_epoch=epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=interval_ms),
        assignment=assigned,
    )


def heartbeat_refused(schema: type, code: ErrorCode, message: str | None) -> Any:
    """A heartbeat's refusal: ``code``, and epoch -1."""
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        member_id=None,
        member_epoch=-1,
        heartbeat_interval=datetime.timedelta(0),
    )


def described_member(member_class: type, member: Any, assigned: Any, **more: Any) -> Any:
    """A described member of either kind (``more``: the fields of one kind alone)."""
    return build(
        member_class,
        member_id=member.member_id,
        rack_id=member.rack_id,
        member_epoch=member.epoch,
        client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=tuple(member.topics),
        assignment=assigned,
        **more,
    )


async def describe_groups(
    broker: Broker,
    request: Request,
    load: Callable[[str], Awaitable[GroupT | None]],
    describe: Callable[[GroupT], tuple[str, tuple[Any, ...]]],
) -> Any:
    """ConsumerGroupDescribe's or ShareGroupDescribe's answer: each group asked ``load``ed
    and ``describe``d (its assignor's name, its members), or dead with the error (not
    found, not authorized, the state out of reach) and no operations told."""
    group_class = request.response_entity("DescribedGroup")
    asked = request.body.include_authorized_operations
    described = []
    for group_id in request.body.group_ids:
        operations = authorized_operations(broker, request, ResourceType.GROUP, group_id, asked)
        group: GroupT | None = None
        code, message = ErrorCode.none, None
        try:
            check_group(broker, request, Operation.DESCRIBE, group_id)
            group = await load(group_id)
            if group is None:
                code, message = ErrorCode.group_id_not_found, f"Group {group_id} not found."
        except StorageUnavailable:
            code = UNAVAILABLE
        except GroupAuthorizationFailed as exc:
            code, message = ErrorCode.group_authorization_failed, str(exc)
        if group is None:  # dead: no epochs, assignor, members or operations
            state, epochs, assignor, members, operations = "Dead", (-1, -1), "", (), NOT_ASKED
        else:
            state, epochs = group.state, (group.epoch, group.assignment_epoch)
            assignor, members = describe(group)
        described.append(
            build(
                group_class,
                error_code=code,
                error_message=message,
                group_id=group_id,
                group_state=state,
                group_epoch=epochs[0],
                assignment_epoch=epochs[1],
                assignor_name=assignor,
                members=members,
                authorized_operations=operations,
            )
        )
    return build(request.response_class, throttle_time=NO_THROTTLE, groups=tuple(described))
