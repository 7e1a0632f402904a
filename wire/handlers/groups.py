"""Consumer group APIs: the coordinator's wire face (FindCoordinator, Join/Sync/Heartbeat/
LeaveGroup, Describe/List/DeleteGroups); committed offsets are in group_offsets.py."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from kio.schema.errors import ErrorCode

from kafkaesque.errors import GroupAuthorizationFailed, StorageUnavailable
from kafkaesque.groups.types import GroupState, JoinRequest
from kafkaesque.log_throttle import LogThrottle, clip
from wire.authorize import (
    NOT_ASKED,
    Operation,
    ResourceType,
    allowed,
    authorized_operations,
    check_group,
    cluster_allowed,
)
from wire.broker import Broker
from wire.errors import error_code
from wire.group_answers import UNAVAILABLE, described_as_classic, described_group, restore_first
from wire.protocol.codec import (
    NO_THROTTLE,
    Request,
    build,
    error_response,
    ok_response,
    schema_class,
)

if TYPE_CHECKING:
    from typing import TypeAlias

    import kio.schema.find_coordinator.v4.request
    import kio.schema.find_coordinator.v5.request
    import kio.schema.find_coordinator.v6.request
    import kio.schema.leave_group.v3.request
    import kio.schema.leave_group.v4.request
    import kio.schema.leave_group.v5.request
    from typing_extensions import TypeIs

    from wire.protocol.kio_types import (
        DeleteGroupsRequest,
        DeleteGroupsResponse,
        DescribeGroupsRequest,
        DescribeGroupsResponse,
        FindCoordinatorRequest,
        FindCoordinatorResponse,
        HeartbeatRequest,
        HeartbeatResponse,
        JoinGroupRequest,
        JoinGroupResponse,
        LeaveGroupRequest,
        LeaveGroupResponse,
        ListGroupsRequest,
        ListGroupsResponse,
        SyncGroupRequest,
        SyncGroupResponse,
    )

    # Not in kio_types: the versions that look up several keys at once (KIP-699) and
    # that name the members leaving (KIP-345).
    FindCoordinatorRequestBatched: TypeAlias = (
        kio.schema.find_coordinator.v4.request.FindCoordinatorRequest
        | kio.schema.find_coordinator.v5.request.FindCoordinatorRequest
        | kio.schema.find_coordinator.v6.request.FindCoordinatorRequest
    )
    LeaveGroupRequestV3Plus: TypeAlias = (
        kio.schema.leave_group.v3.request.LeaveGroupRequest
        | kio.schema.leave_group.v4.request.LeaveGroupRequest
        | kio.schema.leave_group.v5.request.LeaveGroupRequest
    )

log = logging.getLogger(__name__)
MEMBERS = LogThrottle(log)  # members joining and leaving, as clients ask

GROUP_KEY, TRANSACTION_KEY, SHARE_KEY = 0, 1, 2  # FindCoordinator's key types
FIRST_BATCHED_LOOKUP = 4  # FindCoordinator v4+: coordinator_keys (KIP-699)
FIRST_SKIP_ASSIGNMENT = 9  # JoinGroup v9+ (KIP-814)
GROUP_TYPE = "classic"  # ListGroups v5's group_type of the classic groups
CONSUMER_TYPE = "consumer"  # ... and of KIP-848 ones
SHARE_TYPE = "share"  # ... and of share groups (KIP-932), their protocol type too


def _coordinator(broker: Broker, key_type: int, key: str, listener: str) -> dict[str, Any]:
    """The answer for one key of a FindCoordinator: the broker the group or transactional
    id hashes to among the live ones (kafkaesque.partition.leadership), at the address of the
    listener the client used; refusals that every client treats as fatal for what this
    broker does not coordinate."""
    c = broker.config
    if key_type in (GROUP_KEY, TRANSACTION_KEY):
        node = broker.leadership.coordinator(key_type, key)
        info = broker.registry.live.get(node)
        if node == c.node_id or info is None or listener not in info.endpoints:
            node, (host, port) = c.node_id, c.endpoint(listener)
        else:
            host, port = info.endpoints[listener]
        return dict(
            error_code=ErrorCode.none,
            error_message=None,
            node_id=node,
            host=host,
            port=port,
        )
    # KIP-932's share coordinator (key type 2, "group:topic id:partition") is the one
    # Kafka's brokers keep share-partition state with; here Redis holds it, and clients
    # find a share group's coordinator with key type 0. Unknown types: INVALID_REQUEST,
    # as Kafka, rather than a retriable code retried until the caller's timeout.
    error = ErrorCode.invalid_request
    message = (
        "share groups are coordinated by the group coordinator (key type 0) here"
        if key_type == SHARE_KEY
        else f"key type {key_type} is not supported by this broker"
    )
    return dict(error_code=error, error_message=message, node_id=-1, host="", port=-1)


def _authorized_coordinator(
    broker: Broker, request: Request, key_type: int, key: str
) -> dict[str, Any]:
    """``_coordinator``, unless the principal may not DESCRIBE the group (or transactional
    id) the key names."""
    resource = {GROUP_KEY: ResourceType.GROUP, TRANSACTION_KEY: ResourceType.TRANSACTIONAL_ID}
    if key_type in resource and not allowed(
        broker, request, Operation.DESCRIBE, resource[key_type], key
    ):
        code = (
            ErrorCode.group_authorization_failed
            if key_type == GROUP_KEY
            else ErrorCode.transactional_id_authorization_failed
        )
        return dict(error_code=code, error_message=None, node_id=-1, host="", port=-1)
    return _coordinator(broker, key_type, key, request.connection.listener)


def _batched(body: FindCoordinatorRequest) -> TypeIs[FindCoordinatorRequestBatched]:
    """v4+ look up a list of keys (coordinator_keys); before, one (key)."""
    return body.__version__ >= FIRST_BATCHED_LOOKUP


async def find_coordinator(
    broker: Broker, request: Request[FindCoordinatorRequest]
) -> FindCoordinatorResponse:
    body = request.body
    schema = request.response_class
    key_type = getattr(body, "key_type", GROUP_KEY)  # v1+
    if not _batched(body):
        answer = _authorized_coordinator(broker, request, key_type, body.key)
        return build(schema, throttle_time=NO_THROTTLE, **answer)
    coordinator = schema_class(schema, "Coordinator")
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        coordinators=tuple(
            build(coordinator, key=k, **_authorized_coordinator(broker, request, key_type, k))
            for k in body.coordinator_keys
        ),
    )


async def join_group(broker: Broker, request: Request[JoinGroupRequest]) -> JoinGroupResponse:
    body = request.body
    check_group(broker, request, Operation.READ, body.group_id)
    reason = getattr(body, "reason", None)  # v8+
    if reason:
        MEMBERS.client(
            "joins",
            logging.INFO,
            "members joining",
            "group %s: member %r joins: %s",
            clip(body.group_id),
            clip(body.member_id),
            reason,
            logger=log,
        )
    if (unavailable := await restore_first(broker, request)) is not None:
        return unavailable  # the archive has the group (members included): retried
    if await broker.share_groups.exists(body.group_id):  # an id is one kind of group
        refusal = error_response(request.response_class, ErrorCode.inconsistent_group_protocol)
        return cast("JoinGroupResponse", refusal)  # every version has an error_code
    result = await broker.groups.join(
        body.group_id,
        JoinRequest(
            member_id=body.member_id,
            instance_id=getattr(body, "group_instance_id", None),
            client_id=request.client_id or "",
            client_host=request.client_host,
            session_timeout_ms=int(body.session_timeout.total_seconds() * 1000),
            rebalance_timeout_ms=int(body.rebalance_timeout.total_seconds() * 1000)
            if hasattr(body, "rebalance_timeout")
            else -1,
            protocol_type=body.protocol_type,
            protocols=[(p.name, p.metadata) for p in body.protocols],
            # v4+: a new member first gets MEMBER_ID_REQUIRED and its id (KIP-394).
            require_known_member=request.api_version >= 4,
        ),
    )
    schema = request.response_class
    member_class = schema_class(schema, "JoinGroupResponseMember")
    members = result.members
    skip = result.skip_assignment and request.api_version >= FIRST_SKIP_ASSIGNMENT
    if result.skip_assignment and not skip:
        # Before v9 a static leader back in a stable group gets no members, so it cannot
        # compute an assignment that would move the others' partitions, as in Kafka.
        members = []
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        error_code=error_code(result.error),
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol or "",
        leader=result.leader,
        skip_assignment=skip,
        member_id=result.member_id,
        members=tuple(
            build(member_class, member_id=m, group_instance_id=i, metadata=meta)
            for m, i, meta in members
        ),
    )


async def _member_checks(broker: Broker, request: Request) -> Any | None:
    """A member's SyncGroup, Heartbeat or LeaveGroup: GroupAuthorizationFailed without READ
    on the group; then the answer while the group cannot be restored, else None."""
    check_group(broker, request, Operation.READ, request.body.group_id)
    return await restore_first(broker, request)


async def sync_group(broker: Broker, request: Request[SyncGroupRequest]) -> SyncGroupResponse:
    body = request.body
    if (unavailable := await _member_checks(broker, request)) is not None:
        return unavailable
    result = await broker.groups.sync(
        body.group_id,
        body.generation_id,
        body.member_id,
        getattr(body, "group_instance_id", None),  # v3+
        {a.member_id: a.assignment for a in body.assignments},
        (getattr(body, "protocol_type", None), getattr(body, "protocol_name", None)),  # v5+
    )
    return build(
        request.response_class,
        throttle_time=NO_THROTTLE,
        error_code=error_code(result.error),
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


async def heartbeat(broker: Broker, request: Request[HeartbeatRequest]) -> HeartbeatResponse:
    body = request.body
    if (unavailable := await _member_checks(broker, request)) is not None:
        return unavailable
    error = await broker.groups.heartbeat(
        body.group_id, body.generation_id, body.member_id, getattr(body, "group_instance_id", None)
    )
    return build(request.response_class, throttle_time=NO_THROTTLE, error_code=error_code(error))


def _names_members(body: LeaveGroupRequest) -> TypeIs[LeaveGroupRequestV3Plus]:
    """v3+ name the members leaving (a batch, KIP-345); before, the one member asking."""
    return body.__version__ >= 3


async def leave_group(broker: Broker, request: Request[LeaveGroupRequest]) -> LeaveGroupResponse:
    body = request.body
    if (unavailable := await _member_checks(broker, request)) is not None:
        return unavailable  # (left from the empty Redis, the member would come back)
    schema = request.response_class
    if not _names_members(body):
        [error] = await broker.groups.leave(body.group_id, [(body.member_id, None)])
        return build(schema, throttle_time=NO_THROTTLE, error_code=error_code(error))
    leaving = [(m.member_id, m.group_instance_id) for m in body.members]
    for m in body.members:
        if reason := getattr(m, "reason", None):  # v5+
            MEMBERS.client(
                "leaves",
                logging.INFO,
                "members leaving",
                "group %s: member %r leaves: %s",
                clip(body.group_id),
                clip(m.member_id),
                clip(reason),
                logger=log,
            )
    errors = await broker.groups.leave(body.group_id, leaving)
    member_class = schema_class(schema, "MemberResponse")
    return ok_response(
        schema,
        members=tuple(
            build(member_class, member_id=m, group_instance_id=i, error_code=error_code(e))
            for (m, i), e in zip(leaving, errors, strict=True)
        ),
    )


async def describe_groups(
    broker: Broker, request: Request[DescribeGroupsRequest]
) -> DescribeGroupsResponse:
    schema = request.response_class
    group_class = schema_class(schema, "DescribedGroup")
    member_class = schema_class(schema, "DescribedGroupMember")
    asked = getattr(request.body, "include_authorized_operations", False)  # v3+
    described = []
    for group_id in request.body.groups:
        # As Kafka: the operations the principal may do on the group, when asked; none
        # told for a group it may not describe.
        operations = authorized_operations(broker, request, ResourceType.GROUP, group_id, asked)
        try:
            check_group(broker, request, Operation.DESCRIBE, group_id)
            group = await broker.groups.store.load(group_id)
            code = ErrorCode.none
        except StorageUnavailable:
            group, code = None, UNAVAILABLE
        except GroupAuthorizationFailed as exc:
            group, code, operations = None, error_code(exc), NOT_ASKED
        if group is None and code == ErrorCode.none:  # a KIP-848 group, if any
            consumer = await described_as_classic(
                broker, group_id, group_class, member_class, operations
            )
            if consumer is not None:
                described.append(consumer)
                continue
        if group is None:
            described.append(
                build(
                    group_class,
                    error_code=code,
                    group_id=group_id,
                    group_state=GroupState.DEAD,
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=operations,
                )
            )
            continue
        described.append(
            described_group(
                group_class,
                member_class,
                group_id,
                group.state,
                group.protocol_type,
                group.protocol or "",
                ((m, m.metadata_for(group.protocol), m.assignment) for m in group.members.values()),
                operations,
            )
        )
    return build(schema, throttle_time=NO_THROTTLE, groups=tuple(described))


async def list_groups(broker: Broker, request: Request[ListGroupsRequest]) -> ListGroupsResponse:
    schema = request.response_class
    listed_class = schema_class(schema, "ListedGroup")
    # As Kafka, the filters (v4+ states, v5+ types) ignore case; empty: no filter.
    states = {s.lower() for s in getattr(request.body, "states_filter", ())}
    types = {t.lower() for t in getattr(request.body, "types_filter", ())}
    found: list[tuple[str, str, str, str]] = []  # id, protocol type, state, group type
    others = []  # ids without a classic group's state: KIP-848 groups, if any
    for group_id in await broker.groups.admin.list_groups():
        group = await broker.groups.store.load(group_id)
        if group is None:
            others.append(group_id)
        else:
            found.append((group_id, group.protocol_type, group.state, GROUP_TYPE))
    consumer = await broker.consumer_groups.listing(others)
    for group_id, state in consumer.items():
        found.append((group_id, CONSUMER_TYPE, state, CONSUMER_TYPE))
    rest = [g for g in others if g not in consumer]
    for group_id, state in (await broker.share_groups.listing(rest)).items():
        found.append((group_id, SHARE_TYPE, state, SHARE_TYPE))
    # DESCRIBE on the cluster lists every group; else those the principal may DESCRIBE.
    everything = cluster_allowed(broker, request, Operation.DESCRIBE)
    listed = tuple(
        build(listed_class, group_id=g, protocol_type=p, group_state=s, group_type=t)
        for g, p, s, t in found
        if (not states or s.lower() in states)
        and (not types or t in types)
        and (everything or allowed(broker, request, Operation.DESCRIBE, ResourceType.GROUP, g))
    )
    return build(schema, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=listed)


async def delete_groups(
    broker: Broker, request: Request[DeleteGroupsRequest]
) -> DeleteGroupsResponse:
    schema = request.response_class
    result_class = schema_class(schema, "DeletableGroupResult")
    results = []
    for group_id in request.body.groups_names:
        if not allowed(broker, request, Operation.DELETE, ResourceType.GROUP, group_id):
            code = ErrorCode.group_authorization_failed
            results.append(build(result_class, group_id=group_id, error_code=code))
            continue
        try:
            code = error_code(await broker.groups.admin.delete(group_id))
            if code == ErrorCode.group_id_not_found:  # a KIP-848 group, if any
                refused = await broker.consumer_groups.delete(group_id)
                code = code if refused is None else error_code(refused)
            if code == ErrorCode.group_id_not_found:  # a share group, if any
                share = await broker.share_groups.delete(group_id)
                code = code if share is None else ErrorCode(int(share))
        except StorageUnavailable:
            code = UNAVAILABLE
        results.append(build(result_class, group_id=group_id, error_code=code))
    return build(schema, throttle_time=NO_THROTTLE, results=tuple(results))
