"""DeleteRecords: move partitions' log start offsets up, deleting the records below."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkaesque.errors import KafkaesqueError
from wire.authorize import Operation, check_topic
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol.codec import NO_THROTTLE, Request, build, per_partition

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        DeleteRecordsPartition,
        DeleteRecordsPartitionResult,
        DeleteRecordsRequest,
        DeleteRecordsResponse,
    )

NO_WATERMARK = -1  # the low watermark a refused partition answers, as Kafka


async def delete_records(
    broker: Broker, request: Request[DeleteRecordsRequest]
) -> DeleteRecordsResponse:
    """Per partition, the records below the asked-for offset (-1: the high watermark) go,
    from the archive and from Redis, and the answer is the new low watermark. The request's
    timeout is not used: the answer comes once the records are deleted."""
    topic_class, partition_class = request.response_entities(
        "DeleteRecordsTopicResult", "DeleteRecordsPartitionResult"
    )

    async def partition(topic: str, p: DeleteRecordsPartition) -> DeleteRecordsPartitionResult:
        error: KafkaesqueError | None = None
        low_watermark = NO_WATERMARK
        try:
            check_topic(broker, request, Operation.DELETE, topic)
            low_watermark = await broker.log.delete_records(topic, p.partition_index, p.offset)
        except KafkaesqueError as exc:
            error = exc
        return build(
            partition_class,
            partition_index=p.partition_index,
            low_watermark=low_watermark,
            error_code=error_code(error),
        )

    topics = await per_partition(topic_class, request.body.topics, partition)
    return build(request.response_class, throttle_time=NO_THROTTLE, topics=topics)
