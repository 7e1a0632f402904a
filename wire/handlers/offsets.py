"""ListOffsets (earliest, latest, by timestamp) and InitProducerId."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.log import StorageUnavailable, UnknownTopic
from wire.broker import Broker, api
from wire.handlers.metadata import NO_THROTTLE
from wire.protocol import Request, build, response_schema, schema_class

log = logging.getLogger(__name__)

LATEST, EARLIEST = -1, -2


async def find_offset(
    broker: Broker, topic: str, partition: int, timestamp: int
) -> tuple[ErrorCode, int, int]:
    """(error, offset, timestamp) for one ListOffsets partition."""
    try:
        if timestamp == LATEST:
            return ErrorCode.none, (await broker.log.state(topic, partition)).log_end, -1
        if timestamp == EARLIEST:
            return ErrorCode.none, await broker.log.earliest_offset(topic, partition), -1
        if timestamp < 0:
            # Later versions' special lookups (-3 max timestamp, -4 earliest local, ...),
            # which the advertised versions do not have: an error, not a wrong answer.
            return ErrorCode.unsupported_version, -1, -1
        found = await broker.log.offset_for_timestamp(topic, partition, timestamp)
    except UnknownTopic:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    except StorageUnavailable:  # the lookup needs the archive: clients retry this
        return ErrorCode.kafka_storage_error, -1, -1
    if found is None:
        return ErrorCode.none, -1, -1  # no record at or after that time, as Kafka answers
    return ErrorCode.none, found[0], found[1]


def epoch_error(requested: int, current: int) -> ErrorCode:
    """A client's current_leader_epoch against the partition's (KIP-320): older is fenced,
    newer is one this broker does not know yet; -1 (not sent) is never checked."""
    if requested < 0 or requested == current:
        return ErrorCode.none
    return ErrorCode.fenced_leader_epoch if requested < current else ErrorCode.unknown_leader_epoch


async def topic_epochs(broker: Broker, topic: str) -> list[int]:
    """The topic's current leader epochs (one round trip); empty for an unknown topic."""
    try:
        config = await broker.log.topic(topic)
    except UnknownTopic:
        return []
    return await broker.log.leader_epochs(topic, config.partitions)


# v4+ carries leader epochs (KIP-320), v6 is flexible; v7+ adds lookups not implemented here.
@api(2, 1, 6)
async def list_offsets(broker: Broker, request: Request) -> Any:
    schema = response_schema(2, request.api_version)
    topic_class = schema_class(schema, "ListOffsetsTopicResponse")
    partition_class = schema_class(schema, "ListOffsetsPartitionResponse")
    topics = []
    for t in request.body.topics:
        # Read before the lookups: an offset found after a restore raised the epoch is then
        # labelled with the older epoch, which makes a client validate it (a re-read at
        # worst), never with a newer one that would hide a truncation.
        epochs = await topic_epochs(broker, t.name)
        partitions = []
        for p in t.partitions:
            epoch = epochs[p.partition_index] if 0 <= p.partition_index < len(epochs) else -1
            # An unknown partition (epoch -1) is find_offset's to report.
            error = (
                epoch_error(getattr(p, "current_leader_epoch", -1), epoch)
                if epoch >= 0
                else ErrorCode.none
            )
            offset, timestamp = -1, -1
            if error == ErrorCode.none:
                error, offset, timestamp = await find_offset(
                    broker, t.name, p.partition_index, p.timestamp
                )
            partitions.append(
                build(
                    partition_class,
                    partition_index=p.partition_index,
                    error_code=error,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=epoch if error == ErrorCode.none and offset >= 0 else -1,
                )
            )
        topics.append(build(topic_class, name=t.name, partitions=tuple(partitions)))
    return build(schema, throttle_time=NO_THROTTLE, topics=tuple(topics))


@api(22, 0, 0)
async def init_producer_id(broker: Broker, request: Request) -> Any:
    schema = response_schema(22, request.api_version)
    if request.body.transactional_id is not None:
        # Transactions are not implemented (and their APIs are not advertised).
        log.info("refusing transactional producer %r", request.body.transactional_id)
        return build(
            schema,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.invalid_request,
            producer_id=-1,
            producer_epoch=-1,
        )
    producer_id = await broker.log.new_producer_id()
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=producer_id,
        producer_epoch=0,
    )


@api(23, 2, 3)
async def offset_for_leader_epoch(broker: Broker, request: Request) -> Any:
    """Where each asked-for leader epoch ended, so clients detect truncation (KIP-320)."""
    schema = response_schema(23, request.api_version)
    topic_class = schema_class(schema, "OffsetForLeaderTopicResult")
    partition_class = schema_class(schema, "EpochEndOffset")
    topics = []
    for t in request.body.topics:
        epochs = await topic_epochs(broker, t.topic)
        partitions = []
        for p in t.partitions:
            error, epoch, end = ErrorCode.none, -1, -1
            try:
                if not 0 <= p.partition < len(epochs):
                    raise UnknownTopic(f"no partition {p.partition} in {t.topic}")
                error = epoch_error(p.current_leader_epoch, epochs[p.partition])
                if error == ErrorCode.none:
                    epoch, end = await broker.log.epoch_end_offset(
                        t.topic, p.partition, p.leader_epoch
                    )
            except UnknownTopic:
                error = ErrorCode.unknown_topic_or_partition
            partitions.append(
                build(
                    partition_class,
                    error_code=error,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end,
                )
            )
        topics.append(build(topic_class, topic=t.topic, partitions=tuple(partitions)))
    return build(schema, throttle_time=NO_THROTTLE, topics=tuple(topics))
