"""DescribeTopicPartitions (KIP-966): topics and their partitions, a page at a time.

The Java AdminClient's describeTopics uses it since Kafka 3.8. As Kafka does (KafkaApis
and KRaftMetadataCache): the topics asked for, or all when none are, sorted by name and
starting at the cursor's; at most ``response_partition_limit`` partitions (capped at 2000,
Kafka's max.request.partition.size.limit) and ``next_cursor`` where the next page starts.
An unknown topic is listed with UNKNOWN_TOPIC_OR_PARTITION (not when listing all: one
deleted meanwhile is left out) and takes no room on the page. Never auto-creates.

While Redis is away a topic answers LEADER_NOT_AVAILABLE, as Metadata says it; a listing
of all topics lists the ones Metadata listed last, each so, rather than none (which
would tell the client they are gone).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kafkaesque.config.topic_config import TopicConfig, check_topic_name
from kafkaesque.errors import InvalidRequest, InvalidTopic, StorageUnavailable, UnknownTopic
from wire.authorize import Operation, ResourceType, allowed, authorized_operations
from wire.broker import Broker
from wire.protocol.codec import NO_THROTTLE, Request, build, schema_class
from wire.topics import (
    known_topics,
    partition_entries,
    partition_leaders,
    topic_error_entry,
)

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        Cursor,
        DescribeTopicPartitionsRequest,
        DescribeTopicPartitionsResponse,
        DescribeTopicPartitionsResponseTopic,
    )

MAX_PARTITIONS = 2000  # Kafka's max.request.partition.size.limit default
UNAVAILABLE = ErrorCode.leader_not_available  # Redis away, as Metadata says it: retried


async def _config(broker: Broker, name: str) -> TopicConfig | ErrorCode:
    try:
        check_topic_name(name)
        return await broker.log.topic(name)
    except InvalidTopic:
        return ErrorCode.invalid_topic_exception
    except UnknownTopic:
        return ErrorCode.unknown_topic_or_partition
    except StorageUnavailable:
        return UNAVAILABLE


async def describe_topic_partitions(
    broker: Broker, request: Request[DescribeTopicPartitionsRequest]
) -> DescribeTopicPartitionsResponse:
    """A page of topics; a bad cursor fails every topic asked for with INVALID_REQUEST
    (the response has no top-level error code), as Kafka's error response does."""
    schema = request.response_class
    topic_class = request.response_entity("DescribeTopicPartitionsResponseTopic")
    try:
        visible = partial(allowed, broker, request, Operation.DESCRIBE, ResourceType.TOPIC)

        def operations(name: str) -> int:  # always told here (no flag asks), as Kafka
            return authorized_operations(broker, request, ResourceType.TOPIC, name)

        topics, next_cursor = await _page(
            broker, request.body, schema, topic_class, visible, operations
        )
    except InvalidRequest:
        topics = [
            topic_error_entry(topic_class, t.name, ErrorCode.invalid_request)
            for t in request.body.topics
        ]
        next_cursor = None
    return build(schema, throttle_time=NO_THROTTLE, topics=tuple(topics), next_cursor=next_cursor)


async def _page(
    broker: Broker,
    body: DescribeTopicPartitionsRequest,
    schema: type,
    topic_class: type,
    visible: Callable[[str], bool],
    operations: Callable[[str], int],
) -> tuple[list[DescribeTopicPartitionsResponseTopic], Cursor | None]:
    """(the page's topics, the next cursor or None); topics not ``visible`` to the
    principal are left out of a listing and refused when named; ``operations`` gives a
    topic's authorized operations."""
    partition_class = schema_class(schema, "DescribeTopicPartitionsResponsePartition")
    listing = not body.topics
    away = False  # True when Redis could not list them: then each answers UNAVAILABLE
    if listing:
        try:
            listed = await broker.log.list_topics()
        except StorageUnavailable:
            listed, away = known_topics(broker), True
        names = sorted({n for n in listed if visible(n)})
    else:
        names = sorted({t.name for t in body.topics})
    cursor = body.cursor
    if cursor is not None:
        if cursor.topic_name not in names:
            raise InvalidRequest(
                f"the topic list should contain the cursor topic: {cursor.topic_name}"
            )
        if cursor.partition_index < 0:
            raise InvalidRequest("the cursor's partition index cannot be negative")
        names = [n for n in names if n >= cursor.topic_name]
    remaining = max(min(MAX_PARTITIONS, body.response_partition_limit), 1)
    topics: list[DescribeTopicPartitionsResponseTopic] = []
    next_cursor: Cursor | None = None
    for name in names:
        if remaining == 0:  # the page is full: the next one starts at this topic
            next_cursor = build(schema_class(schema, "Cursor"), topic_name=name, partition_index=0)
            break
        if away:
            config: TopicConfig | ErrorCode = UNAVAILABLE
        elif visible(name):
            config = await _config(broker, name)
        else:
            config = ErrorCode.topic_authorization_failed
        first = cursor.partition_index if cursor and cursor.topic_name == name else 0
        if not isinstance(config, ErrorCode):
            end = min(config.partitions, first + remaining)
            try:
                leaders = await partition_leaders(broker, config, range(first, end))
            except StorageUnavailable:
                config = UNAVAILABLE
        if isinstance(config, ErrorCode):
            # a listing leaves out what is gone or hidden, not what cannot be told now
            if not listing or config == UNAVAILABLE:
                topics.append(topic_error_entry(topic_class, name, config))
            continue
        partitions = partition_entries(
            broker,
            partition_class,
            config,
            zip(range(first, end), leaders, strict=True),
            eligible_leader_replicas=(),
            last_known_elr=(),
        )
        topics.append(
            build(
                topic_class,
                error_code=ErrorCode.none,
                name=name,
                topic_id=uuid.UUID(bytes=config.topic_id),
                is_internal=False,
                partitions=partitions,
                topic_authorized_operations=operations(name),
            )
        )
        remaining -= len(partitions)
        if end < config.partitions:  # the page ends inside this topic
            next_cursor = build(
                schema_class(schema, "Cursor"), topic_name=name, partition_index=end
            )
            break
    return topics, next_cursor
