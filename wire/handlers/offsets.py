"""ListOffsets (earliest, latest, by timestamp, max timestamp, local and tiered ends) and
OffsetForLeaderEpoch."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kafkaesque.errors import KafkaesqueError, UnsupportedLookup
from kafkaesque.partition.layer import (
    EARLIEST_LOCAL,
    LATEST_TIERED,
    MAX_TIMESTAMP,
    FoundOffset,
    OffsetLookup,
)
from wire.authorize import Operation, check_topic
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol.codec import NO_THROTTLE, Request, build, per_partition

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        EpochEndOffset,
        ListOffsetsPartition,
        ListOffsetsPartitionResponse,
        ListOffsetsRequest,
        ListOffsetsResponse,
        OffsetForLeaderEpochRequest,
        OffsetForLeaderEpochResponse,
        OffsetForLeaderPartition,
    )

log = logging.getLogger(__name__)

# The ListOffsets version that brought each special timestamp: an older request asking
# for one gets UNSUPPORTED_VERSION, as Kafka's clients refuse to send it.
LOOKUP_VERSIONS = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
READ_COMMITTED = 1  # isolation_level


async def list_offsets(broker: Broker, request: Request[ListOffsetsRequest]) -> ListOffsetsResponse:
    topic_class, partition_class = request.response_entities(
        "ListOffsetsTopicResponse", "ListOffsetsPartitionResponse"
    )
    version = request.api_version
    # v10: the whole request answers within its timeout; a lookup still running then (the
    # archive is slow, say) answers REQUEST_TIMED_OUT. Kafka times only lookups in tiered
    # storage, and a client that leaves the field unset (kafka-python) sends 0: that
    # cannot mean "answer nothing", so 0 is no limit, as before v10.
    timeout = getattr(request.body, "timeout", None)
    deadline = None
    if timeout is not None and timeout.total_seconds() > 0:
        deadline = asyncio.get_running_loop().time() + timeout.total_seconds()

    # isolation_level (v2+) 1, READ_COMMITTED: latest is the last stable offset.
    committed = getattr(request.body, "isolation_level", 0) == READ_COMMITTED

    # Refusals first; every other partition is looked up in one call (the log's ends of
    # all of them in one round trip), answered in the request's order.
    answers: dict[tuple[str, int], FoundOffset | KafkaesqueError | None] = {}
    lookups: list[OffsetLookup] = []
    for t in request.body.topics:
        for p in t.partitions:
            try:
                check_topic(broker, request, Operation.DESCRIBE, t.name)
                if version < LOOKUP_VERSIONS.get(p.timestamp, 0):
                    raise UnsupportedLookup(
                        f"offset lookup {p.timestamp} needs ListOffsets "
                        f"v{LOOKUP_VERSIONS[p.timestamp]}"
                    )
            except KafkaesqueError as exc:
                answers[t.name, p.partition_index] = exc
                continue
            epoch = getattr(p, "current_leader_epoch", -1)
            lookups.append(OffsetLookup(t.name, p.partition_index, p.timestamp, epoch))
    found = await broker.partitions.list_offsets(lookups, committed, deadline)
    answers |= {(x.topic, x.partition): f for x, f in zip(lookups, found, strict=True)}

    async def partition(topic: str, p: ListOffsetsPartition) -> ListOffsetsPartitionResponse:
        answer = answers[topic, p.partition_index]
        error = answer if isinstance(answer, KafkaesqueError) else None
        found = None if isinstance(answer, KafkaesqueError) else answer
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
    return build(request.response_class, throttle_time=NO_THROTTLE, topics=topics)


async def offset_for_leader_epoch(
    broker: Broker, request: Request[OffsetForLeaderEpochRequest]
) -> OffsetForLeaderEpochResponse:
    """Where each asked-for leader epoch ended, so clients detect truncation (KIP-320)."""
    topic_class, partition_class = request.response_entities(
        "OffsetForLeaderTopicResult", "EpochEndOffset"
    )

    async def partition(topic: str, p: OffsetForLeaderPartition) -> EpochEndOffset:
        error: KafkaesqueError | None = None
        epoch, end = -1, -1
        try:
            check_topic(broker, request, Operation.DESCRIBE, topic)
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
    return build(request.response_class, throttle_time=NO_THROTTLE, topics=topics)
