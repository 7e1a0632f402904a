"""Produce: check each partition's batches and append them as they are."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.log import NeedsRecovery, ProducerFenced, StorageUnavailable, UnknownTopic
from kafkaesque.records import CorruptBatch, InvalidRecord, split_batches
from wire.broker import Broker, api
from wire.handlers.metadata import NO_THROTTLE
from wire.protocol import DropConnection, Request, build, response_schema, schema_class

log = logging.getLogger(__name__)

# Advertised from v0 because librdkafka before 2.11 only compresses when Produce v0 is
# offered; kio (like Kafka 4) parses v3 and later, and no current client sends older ones.
MIN_VERSION, MAX_VERSION = 0, 7


async def append_partition(
    broker: Broker, topic: str, partition: int, records: bytes | None
) -> tuple[ErrorCode, int, int]:
    """(error, base offset, log start offset) for one partition's records."""
    if not records:
        return ErrorCode.corrupt_message, -1, -1
    try:
        batches = split_batches(records)
    except InvalidRecord as exc:
        log.info("rejected batch for %s[%d]: %s", topic, partition, exc)
        damaged = isinstance(exc, CorruptBatch)  # retriable; bad content is not
        return ErrorCode.corrupt_message if damaged else ErrorCode.invalid_record, -1, -1
    if any(len(b) > broker.config.max_message_bytes for b in batches):
        return ErrorCode.message_too_large, -1, -1
    try:
        appended = await broker.log.append(topic, partition, batches)
    except UnknownTopic:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    except ProducerFenced as exc:
        return ErrorCode(exc.code), -1, -1
    except (StorageUnavailable, NeedsRecovery) as exc:
        # Redis lost its data and the archive cannot restore the offsets yet: retriable.
        log.warning("cannot append to %s[%d]: %s", topic, partition, exc)
        return ErrorCode.kafka_storage_error, -1, -1
    broker.notifier.notify(topic)
    return ErrorCode.none, appended.base_offsets[0], appended.log_start


@api(0, MIN_VERSION, MAX_VERSION)
async def produce(broker: Broker, request: Request) -> Any:
    body = request.body
    if body.acks not in (0, 1, -1):
        error = ErrorCode.invalid_required_acks
        results = {
            (t.name, p.index): (error, -1, -1) for t in body.topic_data for p in t.partition_data
        }
    else:
        keys = [(t.name, p.index) for t in body.topic_data for p in t.partition_data]
        outcomes = await asyncio.gather(
            *(
                append_partition(broker, t.name, p.index, p.records)
                for t in body.topic_data
                for p in t.partition_data
            )
        )
        results = dict(zip(keys, outcomes, strict=True))
    if body.acks == 0:
        # The client expects no response at all, so an error can only be told by closing
        # the connection, as Kafka does.
        failed = [f"{t}[{p}]: {e[0].name}" for (t, p), e in results.items() if e[0]]
        if failed:
            raise DropConnection(f"acks=0 produce failed: {', '.join(failed)}")
        return None
    schema = response_schema(0, request.api_version)
    topic_class = schema_class(schema, "TopicProduceResponse")
    partition_class = schema_class(schema, "PartitionProduceResponse")
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        responses=tuple(
            build(
                topic_class,
                name=t.name,
                partition_responses=tuple(
                    build(
                        partition_class,
                        index=p.index,
                        error_code=results[t.name, p.index][0],
                        base_offset=results[t.name, p.index][1],
                        log_append_time=None,
                        log_start_offset=results[t.name, p.index][2],
                    )
                    for p in t.partition_data
                ),
            )
            for t in body.topic_data
        ),
    )
