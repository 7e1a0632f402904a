"""DescribeProducers: the idempotent producers each partition keeps sequence state for.

The state is what append.lua checks sequences against (Log.producers); a producer with a
transaction open on the partition reports its first offset as current_txn_start_offset
(Partitions.open_transactions), the others -1, as Kafka. The coordinator epoch is not
kept per partition: -1. The last timestamp is the broker's
clock at the producer's last append, which the state keeps for expiry, where Kafka
gives its last batch's max timestamp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkaesque.errors import KafkaesqueError
from wire.authorize import Operation, check_topic
from wire.broker import Broker
from wire.errors import error_code, error_message
from wire.protocol.codec import NO_THROTTLE, Request, build, per_partition

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        DescribeProducersRequest,
        DescribeProducersResponse,
        PartitionResponse,
    )

NO_TRANSACTION = -1


async def describe_producers(
    broker: Broker, request: Request[DescribeProducersRequest]
) -> DescribeProducersResponse:
    partition_class, state_class = request.response_entities("PartitionResponse", "ProducerState")

    async def answer(topic: str, partition: int) -> PartitionResponse:
        error: KafkaesqueError | None = None
        producers: tuple[object, ...] = ()
        try:
            check_topic(broker, request, Operation.READ, topic)
            states = await broker.log.producers(topic, partition)
            open_txns = dict(await broker.partitions.open_transactions(topic, partition))
        except KafkaesqueError as exc:
            error = exc
        else:
            producers = tuple(
                build(
                    state_class,
                    producer_id=s.producer_id,
                    producer_epoch=s.epoch,
                    last_sequence=s.last_sequence,
                    last_timestamp=s.last_used,
                    coordinator_epoch=NO_TRANSACTION,
                    current_txn_start_offset=open_txns.get(s.producer_id, NO_TRANSACTION),
                )
                for s in states
            )
        return build(
            partition_class,
            partition_index=partition,
            error_code=error_code(error),
            error_message=error_message(error),
            active_producers=producers,
        )

    topic_class = request.response_entity("TopicResponse")
    return build(
        request.response_class,
        throttle_time=NO_THROTTLE,
        topics=await per_partition(
            topic_class, request.body.topics, answer, partitions_field="partition_indexes"
        ),
    )
