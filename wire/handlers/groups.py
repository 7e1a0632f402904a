"""Consumer group APIs: the coordinator's wire face (FindCoordinator, Join/Sync/Heartbeat/
LeaveGroup, OffsetCommit/Fetch, Describe/List/DeleteGroups)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.errors import StorageUnavailable, UnknownTopic
from kafkaesque.group_state import MAX_METADATA, GroupState, JoinRequest
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol import NO_THROTTLE, Request, build, schema_class

GROUP_KEY = 0
# What a coordinator says while it cannot reach the group's state (Redis away): clients
# look the coordinator up again and retry.
UNAVAILABLE = ErrorCode.coordinator_not_available


async def find_coordinator(broker: Broker, request: Request) -> Any:
    schema = request.response_class
    c = broker.config
    if getattr(request.body, "key_type", GROUP_KEY) != GROUP_KEY:
        # No transactions here. COORDINATOR_NOT_AVAILABLE would be retried until the
        # client's timeout; this error is fatal in every client, so init_transactions()
        # fails at once with the message.
        return build(
            schema,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.transactional_id_authorization_failed,
            error_message="transactions are not supported by this broker",
            node_id=-1,
            host="",
            port=-1,
        )
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        node_id=c.node_id,
        host=c.host,
        port=c.port,
    )


async def join_group(broker: Broker, request: Request) -> Any:
    body = request.body
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
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        error_code=error_code(result.error),
        generation_id=result.generation,
        protocol_name=result.protocol or "",
        leader=result.leader,
        member_id=result.member_id,
        members=tuple(
            build(member_class, member_id=m, group_instance_id=i, metadata=meta)
            for m, i, meta in result.members
        ),
    )


async def sync_group(broker: Broker, request: Request) -> Any:
    body = request.body
    error, assignment = await broker.groups.sync(
        body.group_id,
        body.generation_id,
        body.member_id,
        getattr(body, "group_instance_id", None),
        {a.member_id: a.assignment for a in body.assignments},
    )
    schema = request.response_class
    return build(
        schema, throttle_time=NO_THROTTLE, error_code=error_code(error), assignment=assignment
    )


async def heartbeat(broker: Broker, request: Request) -> Any:
    body = request.body
    error = await broker.groups.heartbeat(
        body.group_id, body.generation_id, body.member_id, getattr(body, "group_instance_id", None)
    )
    return build(request.response_class, throttle_time=NO_THROTTLE, error_code=error_code(error))


async def leave_group(broker: Broker, request: Request) -> Any:
    body = request.body
    schema = request.response_class
    if request.api_version < 3:
        [error] = await broker.groups.leave(body.group_id, [(body.member_id, None)])
        return build(schema, throttle_time=NO_THROTTLE, error_code=error_code(error))
    leaving = [(m.member_id, m.group_instance_id) for m in body.members]
    errors = await broker.groups.leave(body.group_id, leaving)
    member_class = schema_class(schema, "MemberResponse")
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        members=tuple(
            build(member_class, member_id=m, group_instance_id=i, error_code=error_code(e))
            for (m, i), e in zip(leaving, errors, strict=True)
        ),
    )


async def _commit(broker: Broker, body: Any) -> dict[tuple[str, int], ErrorCode]:
    """Commit what is valid of an OffsetCommit; the error code of each partition."""
    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets = {}
    partitions_of: dict[str, int] = {}
    for t in body.topics:
        if t.name not in partitions_of:
            try:
                partitions_of[t.name] = (await broker.log.topic(t.name)).partitions
            except UnknownTopic:
                partitions_of[t.name] = 0
        for p in t.partitions:
            key = (t.name, p.partition_index)
            if not 0 <= p.partition_index < partitions_of[t.name]:
                errors[key] = ErrorCode.unknown_topic_or_partition
            elif (
                p.committed_metadata is not None
                and len(p.committed_metadata.encode()) > MAX_METADATA
            ):
                errors[key] = ErrorCode.offset_metadata_too_large
            else:
                offsets[key] = (p.committed_offset, p.committed_metadata, -1)
    group_error = await broker.groups.commit(
        body.group_id,
        body.generation_id_or_member_epoch,
        body.member_id,
        getattr(body, "group_instance_id", None),
        offsets,
    )
    for key in offsets:
        errors[key] = error_code(group_error)
    return errors


async def offset_commit(broker: Broker, request: Request) -> Any:
    body = request.body
    try:
        errors = await _commit(broker, body)
    except StorageUnavailable:
        errors = {
            (t.name, p.partition_index): UNAVAILABLE for t in body.topics for p in t.partitions
        }
    schema = request.response_class
    topic_class = schema_class(schema, "OffsetCommitResponseTopic")
    partition_class = schema_class(schema, "OffsetCommitResponsePartition")
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        topics=tuple(
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
        ),
    )


async def offset_fetch(broker: Broker, request: Request) -> Any:
    body = request.body
    committed = await broker.groups.committed(body.group_id)
    if body.topics is None:  # v2+: every partition the group has committed
        wanted: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            wanted.setdefault(topic, []).append(partition)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in body.topics}
    schema = request.response_class
    topic_class = schema_class(schema, "OffsetFetchResponseTopic")
    partition_class = schema_class(schema, "OffsetFetchResponsePartition")
    topics = []
    for name, partitions in wanted.items():
        entries = []
        for p in partitions:
            c = committed.get((name, p))
            entries.append(
                build(
                    partition_class,
                    partition_index=p,
                    committed_offset=c.offset if c else -1,
                    metadata=c.metadata if c else "",
                    error_code=ErrorCode.none,
                )
            )
        topics.append(build(topic_class, name=name, partitions=tuple(entries)))
    return build(schema, throttle_time=NO_THROTTLE, topics=tuple(topics), error_code=ErrorCode.none)


async def describe_groups(broker: Broker, request: Request) -> Any:
    schema = request.response_class
    group_class = schema_class(schema, "DescribedGroup")
    member_class = schema_class(schema, "DescribedGroupMember")
    described = []
    for group_id in request.body.groups:
        try:
            group = await broker.groups.load(group_id)
            code = ErrorCode.none
        except StorageUnavailable:
            group, code = None, UNAVAILABLE
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
                    authorized_operations=-2147483648,
                )
            )
            continue
        members = tuple(
            build(
                member_class,
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata_for(group.protocol),
                member_assignment=m.assignment,
            )
            for m in group.members.values()
        )
        described.append(
            build(
                group_class,
                error_code=ErrorCode.none,
                group_id=group_id,
                group_state=group.state,
                protocol_type=group.protocol_type,
                protocol_data=group.protocol or "",
                members=members,
                authorized_operations=-2147483648,
            )
        )
    return build(schema, throttle_time=NO_THROTTLE, groups=tuple(described))


async def list_groups(broker: Broker, request: Request) -> Any:
    schema = request.response_class
    listed_class = schema_class(schema, "ListedGroup")
    listed = []
    for group_id in await broker.groups.list_groups():
        group = await broker.groups.load(group_id)
        if group is not None:
            listed.append(build(listed_class, group_id=group_id, protocol_type=group.protocol_type))
    return build(schema, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=tuple(listed))


async def delete_groups(broker: Broker, request: Request) -> Any:
    schema = request.response_class
    result_class = schema_class(schema, "DeletableGroupResult")
    results = []
    for group_id in request.body.groups_names:
        try:
            code = error_code(await broker.groups.delete(group_id))
        except StorageUnavailable:
            code = UNAVAILABLE
        results.append(build(result_class, group_id=group_id, error_code=code))
    return build(schema, throttle_time=NO_THROTTLE, results=tuple(results))
