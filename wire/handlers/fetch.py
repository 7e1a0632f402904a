"""Fetch: whole batches as stored, long-polling until min_bytes arrive or max_wait passes."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.partitions import FetchRequest
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol import NO_THROTTLE, Request, build, schema_class


async def fetch(broker: Broker, request: Request) -> Any:
    body = request.body
    results = await broker.partitions.fetch(
        [
            FetchRequest(
                t.topic,
                p.partition,
                p.fetch_offset,
                p.partition_max_bytes,
                getattr(p, "current_leader_epoch", -1),  # v9+
            )
            for t in body.topics
            for p in t.partitions
        ],
        max_bytes=body.max_bytes,
        min_bytes=body.min_bytes,
        max_wait=body.max_wait.total_seconds(),
        # A client that sends no leader epoch is told of truncation by this connection's
        # memory of the epochs it read at.
        seen_epochs=request.connection.fetch_epochs,
    )
    schema = request.response_class
    topic_class = schema_class(schema, "FetchableTopicResponse")
    partition_class = schema_class(schema, "PartitionData")

    def partition(topic: str, index: int) -> Any:
        r = results[topic, index]
        return build(
            partition_class,
            partition_index=index,
            error_code=error_code(r.error),
            high_watermark=r.high_watermark,
            last_stable_offset=r.high_watermark,  # no transactions: all is stable
            log_start_offset=r.log_start,
            aborted_transactions=(),
            preferred_read_replica=-1,
            records=b"".join(r.batches),
        )

    return build(
        schema,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,  # no incremental fetch sessions: clients keep sending full fetches
        responses=tuple(
            build(
                topic_class,
                topic=t.topic,
                partitions=tuple(partition(t.topic, p.partition) for p in t.partitions),
            )
            for t in body.topics
        ),
    )
