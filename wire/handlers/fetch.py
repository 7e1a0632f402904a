"""Fetch: whole batches as stored, long-polling until min_bytes arrive or max_wait passes."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.log import StorageUnavailable, UnknownTopic
from wire.broker import Broker, api
from wire.handlers.metadata import NO_THROTTLE
from wire.handlers.offsets import epoch_error
from wire.protocol import ConnectionState, Request, build, response_schema, schema_class


async def lost_position(
    broker: Broker, connection: ConnectionState, topic: str, part: Any, epoch: int
) -> bool:
    """For a client that sends no leader epoch (aiokafka, older versions): True when this
    connection last fetched the partition at an older epoch and now fetches past where that
    epoch's records survive, i.e. its position was taken from records Redis lost and new
    ones may have reused those offsets (KIP-320 cannot tell it: it does not check)."""
    key = topic, part.partition
    seen = connection.fetch_epochs.get(key)
    connection.fetch_epochs[key] = epoch
    if seen is None or seen >= epoch:
        return False
    _, end = await broker.log.epoch_end_offset(topic, part.partition, seen)
    return part.fetch_offset > end


async def read_partition(
    broker: Broker, connection: ConnectionState, topic: str, part: Any, limit: int, min_one: bool
) -> tuple[ErrorCode, int, int, list[bytes]]:
    """(error, high watermark, log start, batches) for one partition of a fetch."""
    try:
        result = await broker.log.read(
            topic, part.partition, part.fetch_offset, limit, min_one=min_one
        )
    except UnknownTopic:
        return ErrorCode.unknown_topic_or_partition, -1, -1, []
    except StorageUnavailable:
        # The offset is only in the archive, which is unreachable: clients retry this.
        return ErrorCode.kafka_storage_error, -1, -1, []
    current_leader_epoch = getattr(part, "current_leader_epoch", -1)
    error = epoch_error(current_leader_epoch, result.leader_epoch)
    if error != ErrorCode.none:
        return error, result.log_end, result.log_start, []
    if current_leader_epoch < 0 and await lost_position(
        broker, connection, topic, part, result.leader_epoch
    ):
        # Out of range makes the client reset by its auto.offset.reset (or raise) instead
        # of going on silently over offsets that now hold other records.
        return ErrorCode.offset_out_of_range, result.log_end, result.log_start, []
    if result.below_start or result.past_end:
        return ErrorCode.offset_out_of_range, result.log_end, result.log_start, []
    return ErrorCode.none, result.log_end, result.log_start, result.batches


async def read_all(
    broker: Broker, connection: ConnectionState, body: Any
) -> tuple[dict[tuple[str, int], tuple], int, bool]:
    """Read every requested partition within max_bytes; (results, bytes, any error)."""
    results: dict[tuple[str, int], tuple] = {}
    remaining, total, failed = body.max_bytes, 0, False
    for t in body.topics:
        for part in t.partitions:
            limit = min(part.partition_max_bytes, remaining)
            # KIP-74: the first batch of the response comes even when over the limits.
            outcome = await read_partition(
                broker, connection, t.topic, part, limit, min_one=total == 0
            )
            size = sum(map(len, outcome[3]))
            total += size
            remaining -= size
            failed = failed or outcome[0] != ErrorCode.none
            results[t.topic, part.partition] = outcome
    return results, total, failed


@api(1, 4, 11)
async def fetch(broker: Broker, request: Request) -> Any:
    body = request.body
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.max_wait.total_seconds()
    topics = {t.topic for t in body.topics}
    while True:
        # Registered before reading, so an append racing with the read still wakes us.
        waiter = broker.notifier.waiter(topics)
        try:
            results, total, failed = await read_all(broker, request.connection, body)
            timeout = deadline - loop.time()
            if total >= body.min_bytes or failed or timeout <= 0 or broker.notifier.closed:
                break
            done, _ = await asyncio.wait({waiter}, timeout=timeout)
            if not done:
                break  # nothing was appended: what we read is still current
        finally:
            broker.notifier.discard(waiter, topics)
    schema = response_schema(1, request.api_version)
    topic_class = schema_class(schema, "FetchableTopicResponse")
    partition_class = schema_class(schema, "PartitionData")
    responses = []
    for t in body.topics:
        partitions = []
        for part in t.partitions:
            error, high_watermark, log_start, batches = results[t.topic, part.partition]
            partitions.append(
                build(
                    partition_class,
                    partition_index=part.partition,
                    error_code=error,
                    high_watermark=high_watermark,
                    last_stable_offset=high_watermark,  # no transactions: all is stable
                    log_start_offset=log_start,
                    aborted_transactions=(),
                    preferred_read_replica=-1,
                    records=b"".join(batches),
                )
            )
        responses.append(build(topic_class, topic=t.topic, partitions=tuple(partitions)))
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,  # no incremental fetch sessions: clients keep sending full fetches
        responses=tuple(responses),
    )
