"""Committed offsets of consumer groups on the wire: OffsetCommit, OffsetFetch (one group
before v8, a batch of groups from v8) and OffsetDelete."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kafkaesque.errors import Code, StorageUnavailable, UnknownTopic
from kafkaesque.groups.types import MAX_METADATA
from kafkaesque.partition.read_types import NO_EPOCH
from kafkaesque.types import TopicPartition
from wire.authorize import Operation, ResourceType, allowed, topics_allowed
from wire.broker import Broker
from wire.errors import error_code
from wire.group_answers import UNAVAILABLE, restore_first, topic_errors
from wire.protocol.codec import NO_THROTTLE, Request, build
from wire.protocol.kio_types import fetches_groups

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetDeleteRequest,
        OffsetDeleteResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
        OffsetFetchResponseTopic,
        OffsetFetchTopic,
    )


async def _commit(
    broker: Broker, request: Request[OffsetCommitRequest]
) -> dict[TopicPartition, ErrorCode]:
    """Commit what is valid of an OffsetCommit; the error code of each partition."""
    body = request.body
    errors: dict[TopicPartition, ErrorCode] = {}
    if not allowed(broker, request, Operation.READ, ResourceType.GROUP, body.group_id):
        code = ErrorCode.group_authorization_failed
        return {(t.name, p.partition_index): code for t in body.topics for p in t.partitions}
    readable = topics_allowed(broker, request, Operation.READ, {t.name for t in body.topics})
    offsets: dict[TopicPartition, tuple[int, str | None, int]] = {}
    partitions_of: dict[str, int] = {}
    for t in body.topics:
        if t.name not in readable:
            errors.update(
                ((t.name, p.partition_index), ErrorCode.topic_authorization_failed)
                for p in t.partitions
            )
            continue
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
                epoch = getattr(p, "committed_leader_epoch", NO_EPOCH)  # v6+
                offsets[key] = (p.committed_offset, p.committed_metadata, epoch)
    # v2-v4's retention_time is not kept: offsets.retention.minutes decides, as for v5+.
    group_error = await broker.groups.admin.commit(
        body.group_id,
        body.generation_id_or_member_epoch,
        body.member_id,
        getattr(body, "group_instance_id", None),  # v7+
        offsets,
        request.api_version,
    )
    errors.update(dict.fromkeys(offsets, error_code(group_error)))
    return errors


async def offset_commit(
    broker: Broker, request: Request[OffsetCommitRequest]
) -> OffsetCommitResponse:
    body = request.body
    try:
        errors = await _commit(broker, request)
    except StorageUnavailable:
        errors = {
            (t.name, p.partition_index): UNAVAILABLE for t in body.topics for p in t.partitions
        }
    schema = request.response_class
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        topics=topic_errors(schema, "OffsetCommit", body, errors),
    )


async def _fetch_group(
    broker: Broker,
    request: Request[OffsetFetchRequest],
    group_id: str,
    topics: Sequence[OffsetFetchTopic] | None,
    batched: bool,
    require_stable: bool = False,
) -> tuple[tuple[OffsetFetchResponseTopic, ...], ErrorCode]:
    """One group's committed offsets as response topics, and the group's error code.
    ``topics`` None: every partition the group has committed (v2+). With require_stable
    (v7+) a partition with offsets pending on an open transaction answers
    UNSTABLE_OFFSET_COMMIT (the client asks again); a classic group's offsets need no
    member id or epoch (v9), as in Kafka. The principal needs READ on the group, and sees
    only the topics it may DESCRIBE."""
    if not allowed(broker, request, Operation.READ, ResourceType.GROUP, group_id):
        return (), ErrorCode.group_authorization_failed
    try:
        committed = await broker.groups.admin.committed(group_id)
        if not committed and broker.log.recover and await broker.log.needs_recovery():
            # Answering "none committed" from the empty Redis would send the group's
            # consumers to their reset policy (the log's start or end).
            await restore_first(broker)
            committed = await broker.groups.admin.committed(group_id)
        pending = await broker.transactions.pending_offsets(group_id) if require_stable else set()
    except StorageUnavailable:
        return (), UNAVAILABLE
    if topics is None:
        wanted: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            wanted.setdefault(topic, []).append(partition)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in topics}
    visible = topics_allowed(broker, request, Operation.DESCRIBE, wanted)
    if topics is None:
        wanted = {name: ps for name, ps in wanted.items() if name in visible}
    suffix = "s" if batched else ""  # v8 renamed the response's entities
    topic_class = request.response_entity(f"OffsetFetchResponseTopic{suffix}")
    partition_class = request.response_entity(f"OffsetFetchResponsePartition{suffix}")
    out = []
    for name, partitions in wanted.items():
        entries = []
        for p in partitions:
            c = committed.get((name, p))
            unstable = (name, p) in pending
            c = None if unstable else c
            entries.append(
                build(
                    partition_class,
                    partition_index=p,
                    committed_offset=c.offset if c else -1,
                    committed_leader_epoch=c.leader_epoch if c else NO_EPOCH,
                    metadata=c.metadata if c else "",
                    error_code=(
                        ErrorCode.topic_authorization_failed
                        if name not in visible
                        else ErrorCode.unstable_offset_commit
                        if unstable
                        else ErrorCode.none
                    ),
                )
            )
        out.append(build(topic_class, name=name, partitions=tuple(entries)))
    return tuple(out), ErrorCode.none


async def offset_fetch(broker: Broker, request: Request[OffsetFetchRequest]) -> OffsetFetchResponse:
    body = request.body
    schema = request.response_class
    if not fetches_groups(body):
        stable = getattr(body, "require_stable", False)  # v7+ (KIP-447)
        topics, code = await _fetch_group(
            broker, request, body.group_id, body.topics, False, stable
        )
        return build(schema, throttle_time=NO_THROTTLE, topics=topics, error_code=code)
    group_class = request.response_entity("OffsetFetchResponseGroup")
    groups = []
    for g in body.groups:  # each group has its own error
        topics, code = await _fetch_group(
            broker, request, g.group_id, g.topics, True, body.require_stable
        )
        groups.append(build(group_class, group_id=g.group_id, topics=topics, error_code=code))
    return build(schema, throttle_time=NO_THROTTLE, groups=tuple(groups))


async def offset_delete(
    broker: Broker, request: Request[OffsetDeleteRequest]
) -> OffsetDeleteResponse:
    body = request.body
    readable = topics_allowed(broker, request, Operation.READ, {t.name for t in body.topics})
    partitions: list[tuple[str, int]] = [
        (t.name, p.partition_index) for t in body.topics if t.name in readable for p in t.partitions
    ]
    results: dict[tuple[str, int], Code]
    try:
        if not allowed(broker, request, Operation.DELETE, ResourceType.GROUP, body.group_id):
            code, results = ErrorCode.group_authorization_failed, {}
        else:
            group_error, results = await broker.groups.admin.delete_offsets(
                body.group_id, partitions
            )
            code = error_code(group_error)
    except StorageUnavailable:
        code, results = UNAVAILABLE, {}
    schema = request.response_class
    if code != ErrorCode.none:  # as Kafka: a group-level refusal lists no topics
        return build(schema, error_code=code, throttle_time=NO_THROTTLE, topics=())
    errors = {key: error_code(result) for key, result in results.items()}
    denied = ErrorCode.topic_authorization_failed
    errors.update(
        ((t.name, p.partition_index), denied)
        for t in body.topics
        for p in t.partitions
        if t.name not in readable
    )
    topics = topic_errors(schema, "OffsetDelete", body, errors)
    return build(schema, error_code=ErrorCode.none, throttle_time=NO_THROTTLE, topics=topics)
