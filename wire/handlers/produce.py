"""Produce: check each partition's batches and append them as their topic's configs ask."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.errors import (
    InvalidRecord,
    KafkaesqueError,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
)
from kafkaesque.partitions import Appended
from wire.authorize import Operation, ResourceType, allowed, topics_allowed
from wire.broker import Broker
from wire.errors import error_code, error_message
from wire.protocol import DropConnection, Request, build, schema_class

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def timestamp(ms: int) -> datetime.datetime | None:
    """A Kafka timestamp field's value: -1 (none) is None."""
    return None if ms < 0 else EPOCH + datetime.timedelta(milliseconds=ms)


def record_errors(error_class: type | None, error: KafkaesqueError | None) -> tuple[Any, ...]:
    """Produce v8+: the records (by index in their batch) that made the batch be refused,
    where the core knew them; the partition's error_message says why."""
    if error_class is None or not isinstance(error, InvalidRecord):
        return ()
    message = str(error)
    return tuple(
        build(error_class, batch_index=i, batch_index_error_message=message) for i in error.records
    )


def denied_writes(
    broker: Broker, request: Request, records: dict[tuple[str, int], Any]
) -> dict[tuple[str, int], Appended]:
    """The partitions of topics the principal may not WRITE, refused; all of them for a
    transactional producer without WRITE on its transactional id."""
    txn_id = getattr(request.body, "transactional_id", None)  # v3+
    if txn_id is not None and not allowed(
        broker, request, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id
    ):
        refusal = TransactionalIdAuthorizationFailed(f"Not authorized to WRITE {txn_id}")
        return {key: Appended(refusal) for key in records}
    topics = {t for t, _ in records}
    refused = topics - topics_allowed(broker, request, Operation.WRITE, topics)
    return {
        (t, p): Appended(TopicAuthorizationFailed(f"Not authorized to WRITE topic {t}"))
        for t, p in records
        if t in refused
    }


async def produce(broker: Broker, request: Request) -> Any:
    body = request.body  # a wire.produce_request.ProduceBody: topics and partitions are tuples
    records = {(t, p): data for t, partitions in body.topic_data for p, data in partitions}
    if body.acks not in (0, 1, -1):
        codes = {key: (ErrorCode.invalid_required_acks, Appended()) for key in records}
    else:
        denied = denied_writes(broker, request, records)
        # acks=all waits up to the request's timeout for the append to be durable.
        results = await broker.partitions.append_many(
            {key: r for key, r in records.items() if key not in denied},
            acks_all=body.acks == -1,
            timeout_ms=body.timeout_ms,
        )
        results.update(denied)
        codes = {key: (error_code(r.error), r) for key, r in results.items()}
    # Redis short of memory: producers hold back (the response waits, and says so in
    # throttle_time, as Kafka's quotas do) while the archiver drains.
    throttle_ms = broker.memory.throttle_ms()
    if throttle_ms:
        await asyncio.sleep(throttle_ms / 1000)
    if body.acks == 0:
        # The client expects no response at all, so an error can only be told by closing
        # the connection, as Kafka does.
        failed = [f"{t}[{p}]: {code.name}" for (t, p), (code, _) in codes.items() if code]
        if failed:
            raise DropConnection(f"acks=0 produce failed: {', '.join(failed)}")
        return None
    schema = request.response_class
    topic_class = schema_class(schema, "TopicProduceResponse")
    partition_class = schema_class(schema, "PartitionProduceResponse")
    error_class = (
        schema_class(schema, "BatchIndexAndErrorMessage") if request.api_version >= 8 else None
    )

    def partition(topic: str, index: int) -> Any:
        # v10's current_leader (KIP-951) keeps its default: it is only for
        # NOT_LEADER_OR_FOLLOWER, which the one broker, leader of all, never answers.
        code, result = codes[topic, index]
        return build(
            partition_class,
            index=index,
            error_code=code,
            base_offset=result.base_offset,
            log_append_time=timestamp(result.log_append_time),
            log_start_offset=result.log_start,
            record_errors=record_errors(error_class, result.error),
            error_message=error_message(result.error),
        )

    return build(
        schema,
        throttle_time=datetime.timedelta(milliseconds=throttle_ms),
        responses=tuple(
            build(
                topic_class,
                name=t,
                partition_responses=tuple(partition(t, p) for p, _ in partitions),
            )
            for t, partitions in body.topic_data
        ),
    )
