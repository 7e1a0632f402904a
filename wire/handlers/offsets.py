"""ListOffsets (earliest, latest, by timestamp), OffsetForLeaderEpoch and InitProducerId."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.errors import KafkaesqueError
from kafkaesque.partitions import FoundOffset
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol import NO_THROTTLE, Request, build, per_partition, schema_class

log = logging.getLogger(__name__)


async def list_offsets(broker: Broker, request: Request) -> Any:
    schema = request.response_class
    topic_class = schema_class(schema, "ListOffsetsTopicResponse")
    partition_class = schema_class(schema, "ListOffsetsPartitionResponse")

    async def partition(topic: str, p: Any) -> Any:
        error: KafkaesqueError | None = None
        found: FoundOffset | None = None
        try:
            found = await broker.partitions.list_offset(
                topic, p.partition_index, p.timestamp, getattr(p, "current_leader_epoch", -1)
            )
        except KafkaesqueError as exc:
            error = exc
        return build(
            partition_class,
            partition_index=p.partition_index,
            error_code=error_code(error),
            # No record at or after the time: -1, as Kafka answers.
            timestamp=found.timestamp if found else -1,
            offset=found.offset if found else -1,
            leader_epoch=found.leader_epoch if found else -1,
        )

    topics = await per_partition(topic_class, request.body.topics, partition)
    return build(schema, throttle_time=NO_THROTTLE, topics=topics)


async def init_producer_id(broker: Broker, request: Request) -> Any:
    schema = request.response_class
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


async def offset_for_leader_epoch(broker: Broker, request: Request) -> Any:
    """Where each asked-for leader epoch ended, so clients detect truncation (KIP-320)."""
    schema = request.response_class
    topic_class = schema_class(schema, "OffsetForLeaderTopicResult")
    partition_class = schema_class(schema, "EpochEndOffset")

    async def partition(topic: str, p: Any) -> Any:
        error: KafkaesqueError | None = None
        epoch, end = -1, -1
        try:
            epoch, end = await broker.partitions.epoch_end_offset(
                topic, p.partition, p.leader_epoch, p.current_leader_epoch
            )
        except KafkaesqueError as exc:
            error = exc
        return build(
            partition_class,
            error_code=error_code(error),
            partition=p.partition,
            leader_epoch=epoch,
            end_offset=end,
        )

    topics = await per_partition(topic_class, request.body.topics, partition, "topic")
    return build(schema, throttle_time=NO_THROTTLE, topics=topics)
