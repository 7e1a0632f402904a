"""DescribeLogDirs and AlterReplicaLogDirs: the storage behind each partition, as Kafka's
log directories.

A partition's records are in Redis, and with an archive its older records are in
PostgreSQL too (tiered), so there are two "log dirs": ``redis``, sized by the bytes of the
batches the partition holds in Redis (its pages, as Log.state counts them), with Redis'
maxmemory as total and what is left of it as usable; and ``archive``, sized by the bytes of
the partition's archived rows, whose disk PostgreSQL cannot tell (-1, Kafka's unknown).
Every partition asked about that exists appears in each dir; unknown ones are left out,
as Kafka leaves out partitions it has no log for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kafkaesque.errors import StorageUnavailable, UnknownTopic
from wire.authorize import Operation, cluster_allowed
from wire.broker import Broker
from wire.protocol.codec import NO_THROTTLE, Request, build

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        AlterReplicaLogDirsRequest,
        AlterReplicaLogDirsResponse,
        DescribableLogDirTopic,
        DescribeLogDirsRequest,
        DescribeLogDirsResponse,
        DescribeLogDirsResult,
    )

REDIS_DIR, ARCHIVE_DIR = "redis", "archive"
UNKNOWN = -1  # Kafka's total/usable bytes when not known

# topic -> (partition -> bytes)
Sizes = dict[str, dict[int, int]]


async def _partitions(
    broker: Broker, topics: Sequence[DescribableLogDirTopic] | None
) -> dict[str, list[int]]:
    """topic -> the partitions asked about that exist (all of every topic for null)."""
    wanted = (
        [(name, None) for name in await broker.log.list_topics()]
        if topics is None
        else [(t.topic, t.partitions) for t in topics]
    )
    found: dict[str, list[int]] = {}
    for name, partitions in wanted:
        try:
            count = (await broker.log.topic(name)).partitions
        except UnknownTopic:
            continue
        asked = range(count) if partitions is None else partitions
        kept = [p for p in dict.fromkeys(asked) if 0 <= p < count]
        if kept:
            found.setdefault(name, []).extend(kept)
    return found


async def _redis_sizes(broker: Broker, partitions: dict[str, list[int]]) -> Sizes:
    async def held(topic: str, p: int) -> int:
        return (await broker.log.state(topic, p)).bytes

    sizes: Sizes = {}
    for topic, ps in partitions.items():
        try:
            sizes[topic] = dict(
                zip(ps, await asyncio.gather(*(held(topic, p) for p in ps)), strict=True)
            )
        except UnknownTopic:
            continue  # deleted meanwhile
    return sizes


async def _archive_sizes(broker: Broker, partitions: dict[str, list[int]]) -> Sizes:
    cold = broker.log.cold
    assert cold is not None
    sizes: Sizes = {}
    for topic, ps in partitions.items():
        archived = await cold.partition_bytes(topic)
        sizes[topic] = {p: archived.get(p, 0) for p in ps}
    return sizes


async def describe_log_dirs(
    broker: Broker, request: Request[DescribeLogDirsRequest]
) -> DescribeLogDirsResponse:
    schema = request.response_class
    result_class, topic_class, partition_class = request.response_entities(
        "DescribeLogDirsResult", "DescribeLogDirsTopic", "DescribeLogDirsPartition"
    )
    if not cluster_allowed(broker, request, Operation.DESCRIBE):  # v1-2: no dirs, as Kafka
        code = ErrorCode.cluster_authorization_failed
        return build(schema, throttle_time=NO_THROTTLE, error_code=code, results=())
    try:
        partitions = await _partitions(broker, request.body.topics)
        memory = await broker.log.stores.memory_use()
    except StorageUnavailable:
        # Redis away: which partitions there are is not known, so no dir can be told.
        # Each answers as an offline dir does in Kafka; the top-level code is the
        # request's own, NONE.
        dirs = [REDIS_DIR] + ([ARCHIVE_DIR] if broker.log.cold is not None else [])
        offline = tuple(
            build(
                result_class,
                error_code=ErrorCode.kafka_storage_error,
                log_dir=name,
                topics=(),
                total_bytes=UNKNOWN,
                usable_bytes=UNKNOWN,
            )
            for name in dirs
        )
        return build(schema, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=offline)

    async def result(
        name: str, sizes: Callable[[], Awaitable[Sizes]], total: int, usable: int
    ) -> DescribeLogDirsResult:
        try:
            found, code = await sizes(), ErrorCode.none
        except StorageUnavailable:  # the dir is offline: Kafka's code for that
            found, code = {}, ErrorCode.kafka_storage_error
        topics = tuple(
            build(
                topic_class,
                name=topic,
                partitions=tuple(
                    build(
                        partition_class,
                        partition_index=p,
                        partition_size=size,
                        offset_lag=0,  # the only replica is the current one, never behind
                        is_future_key=False,
                    )
                    for p, size in by_partition.items()
                ),
            )
            for topic, by_partition in found.items()
        )
        return build(
            result_class,
            error_code=code,
            log_dir=name,
            topics=topics,
            total_bytes=total,
            usable_bytes=usable,
        )

    total = memory.limit or UNKNOWN  # no maxmemory: bounded by the machine, not known
    usable = max(memory.limit - memory.used, 0) if memory.limit else UNKNOWN
    results = [await result(REDIS_DIR, lambda: _redis_sizes(broker, partitions), total, usable)]
    if broker.log.cold is not None:
        results.append(
            await result(ARCHIVE_DIR, lambda: _archive_sizes(broker, partitions), UNKNOWN, UNKNOWN)
        )
    return build(
        schema, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=tuple(results)
    )


async def alter_replica_log_dirs(
    broker: Broker, request: Request[AlterReplicaLogDirsRequest]
) -> AlterReplicaLogDirsResponse:
    """AlterReplicaLogDirs, truthfully: a partition's replica lives in Redis, the one log
    dir that holds replicas, so no move is ever needed. A partition asked to go to
    ``redis`` answers NONE (it is there); ``archive`` holds the older records of every
    partition but no replica, KAFKA_STORAGE_ERROR; any other path is no log dir of this
    broker, LOG_DIR_NOT_FOUND, as Kafka answers. A partition that does not exist answers
    REPLICA_NOT_AVAILABLE (Kafka's answer when it hosts no replica of it). While Redis is
    away, KAFKA_STORAGE_ERROR (an offline log dir's code: retried). Needs ALTER on the
    cluster, as Kafka."""
    topic_class, partition_class = request.response_entities(
        "AlterReplicaLogDirTopicResult", "AlterReplicaLogDirPartitionResult"
    )
    allowed = cluster_allowed(broker, request, Operation.ALTER)
    outcome: dict[str, dict[int, ErrorCode]] = {}
    counts: dict[str, int | None] = {}  # topic -> its partitions (0: none; None: Redis away)

    async def count(name: str) -> int | None:
        if name not in counts:
            counts[name] = await _partition_count(broker, name)
        return counts[name]

    for wanted in request.body.dirs:
        for topic in wanted.topics:
            for partition in topic.partitions:
                if not allowed:
                    code = ErrorCode.cluster_authorization_failed
                elif (partitions := await count(topic.name)) is None:
                    code = ErrorCode.kafka_storage_error  # where its replica is, unknown
                elif not 0 <= partition < partitions:
                    code = ErrorCode.replica_not_available
                elif wanted.path == REDIS_DIR:
                    code = ErrorCode.none
                elif wanted.path == ARCHIVE_DIR and broker.log.cold is not None:
                    code = ErrorCode.kafka_storage_error
                else:
                    code = ErrorCode.log_dir_not_found
                outcome.setdefault(topic.name, {})[partition] = code
    results = tuple(
        build(
            topic_class,
            topic_name=name,
            partitions=tuple(
                build(partition_class, partition_index=p, error_code=code)
                for p, code in codes.items()
            ),
        )
        for name, codes in outcome.items()
    )
    return build(request.response_class, throttle_time=NO_THROTTLE, results=results)


async def _partition_count(broker: Broker, topic: str) -> int | None:
    """The topic's partitions: 0 when it does not exist, None when Redis is away."""
    try:
        return (await broker.log.topic(topic)).partitions
    except UnknownTopic:
        return 0
    except StorageUnavailable:
        return None
