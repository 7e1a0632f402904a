"""DeleteRecords: move partitions' log start offsets up, deleting the records below."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kafkaesque.errors import KafkaesqueError
from wire.authorize import Operation, check_topic
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol.codec import NO_THROTTLE, Request, build, per_partition, schema_class

if TYPE_CHECKING:
    import kio.schema.delete_records.v0.request
    import kio.schema.delete_records.v0.response
    import kio.schema.delete_records.v1.request
    import kio.schema.delete_records.v1.response
    import kio.schema.delete_records.v2.request
    import kio.schema.delete_records.v2.response

    # The kio classes of the versions offered (wire/handlers/__init__.py).
    DeleteRecordsRequest: TypeAlias = (
        kio.schema.delete_records.v0.request.DeleteRecordsRequest
        | kio.schema.delete_records.v1.request.DeleteRecordsRequest
        | kio.schema.delete_records.v2.request.DeleteRecordsRequest
    )
    DeleteRecordsPartition: TypeAlias = (
        kio.schema.delete_records.v0.request.DeleteRecordsPartition
        | kio.schema.delete_records.v1.request.DeleteRecordsPartition
        | kio.schema.delete_records.v2.request.DeleteRecordsPartition
    )
    DeleteRecordsResponse: TypeAlias = (
        kio.schema.delete_records.v0.response.DeleteRecordsResponse
        | kio.schema.delete_records.v1.response.DeleteRecordsResponse
        | kio.schema.delete_records.v2.response.DeleteRecordsResponse
    )
    DeleteRecordsPartitionResult: TypeAlias = (
        kio.schema.delete_records.v0.response.DeleteRecordsPartitionResult
        | kio.schema.delete_records.v1.response.DeleteRecordsPartitionResult
        | kio.schema.delete_records.v2.response.DeleteRecordsPartitionResult
    )

NO_WATERMARK = -1  # the low watermark a refused partition answers, as Kafka


async def delete_records(
    broker: Broker, request: Request[DeleteRecordsRequest]
) -> DeleteRecordsResponse:
    """Per partition, the records below the asked-for offset (-1: the high watermark) go,
    from the archive and from Redis, and the answer is the new low watermark. The request's
    timeout is not used: the answer comes once the records are deleted."""
    schema = request.response_class
    topic_class = schema_class(schema, "DeleteRecordsTopicResult")
    partition_class = schema_class(schema, "DeleteRecordsPartitionResult")

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
    return build(schema, throttle_time=NO_THROTTLE, topics=topics)
