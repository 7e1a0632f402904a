"""Fetch: whole batches as stored, long-polling until min_bytes arrive or max_wait passes.

isolation_level READ_COMMITTED gets only whole batches below the last stable offset and
the aborted transactions among them, whose records the client drops itself, as Kafka's
brokers answer; READ_UNCOMMITTED gets everything up to the high watermark.

v12 tells a client whose log diverged where to truncate (diverging_epoch), v13 names topics
by id, v16 points a fenced client at the current leader (KIP-951). Fetch sessions (KIP-227)
are not kept: every response says session 0, so clients go on sending full fetches.
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.errors import (
    FencedLeaderEpoch,
    TopicAuthorizationFailed,
    UnknownFetchSession,
    UnknownTopicId,
)
from kafkaesque.partitions import Fetched, FetchRequest
from wire.authorize import Operation, topics_allowed
from wire.broker import Broker
from wire.errors import error_code
from wire.handlers.metadata import broker_entries
from wire.protocol import NO_THROTTLE, Request, build, schema_class

# session_epoch of a full fetch that opens a session, and of one without (or closing) one.
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
TOPIC_IDS_VERSION = 13  # topics named by id only
LEADER_HINT_VERSION = 16  # current_leader and node_endpoints (KIP-951)
READ_COMMITTED = 1  # isolation_level (v4+)


async def topic_name(broker: Broker, topic: Any, version: int) -> str | None:
    """The name of a requested topic; None for an unknown topic id."""
    if version < TOPIC_IDS_VERSION:
        return topic.topic
    return None if topic.topic_id is None else await broker.topic_ids.name(topic.topic_id.bytes)


async def fetch(broker: Broker, request: Request) -> Any:
    body, version = request.body, request.api_version
    session_epoch = getattr(body, "session_epoch", FINAL_EPOCH)  # v7+
    if session_epoch not in (INITIAL_EPOCH, FINAL_EPOCH):
        # An incremental fetch: no session of ours can exist (every answer said 0).
        raise UnknownFetchSession(f"no fetch session {body.session_id}")
    names = [await topic_name(broker, t, version) for t in body.topics]
    readable = topics_allowed(broker, request, Operation.READ, {n for n in names if n})
    results = await broker.partitions.fetch(
        [
            FetchRequest(
                name,
                p.partition,
                p.fetch_offset,
                p.partition_max_bytes,
                getattr(p, "current_leader_epoch", -1),  # v9+
                getattr(p, "last_fetched_epoch", -1),  # v12+
            )
            for name, t in zip(names, body.topics, strict=True)
            if name in readable
            for p in t.partitions
        ],
        max_bytes=body.max_bytes,
        min_bytes=body.min_bytes,
        max_wait=body.max_wait.total_seconds(),
        # A client that sends no leader epoch is told of truncation by this connection's
        # memory of the epochs it read at.
        seen_epochs=request.connection.fetch_epochs,
        committed=getattr(body, "isolation_level", 0) == READ_COMMITTED,
    )
    schema = request.response_class
    topic_class = schema_class(schema, "FetchableTopicResponse")
    partition_class = schema_class(schema, "PartitionData")
    leader_hints = version >= LEADER_HINT_VERSION
    aborted_class = schema_class(schema, "AbortedTransaction")

    def partition(name: str | None, topic_id: uuid.UUID | None, index: int) -> Any:
        if name is None:
            r = Fetched(UnknownTopicId(f"no topic has the id {topic_id}"))
        elif name not in readable:
            r = Fetched(TopicAuthorizationFailed(f"Not authorized to READ topic {name}"))
        else:
            r = results[name, index]
        tagged: dict[str, Any] = {}
        if r.diverging_epoch is not None:
            epoch, end = r.diverging_epoch
            tagged["diverging_epoch"] = build(
                schema_class(schema, "EpochEndOffset"), epoch=epoch, end_offset=end
            )
        if leader_hints and isinstance(r.error, FencedLeaderEpoch):
            # The client's epoch is stale: this broker still leads, at this epoch.
            tagged["current_leader"] = build(
                schema_class(schema, "LeaderIdAndEpoch"),
                leader_id=broker.config.node_id,
                leader_epoch=r.leader_epoch,
            )
        return build(
            partition_class,
            partition_index=index,
            error_code=error_code(r.error),
            high_watermark=r.high_watermark,
            last_stable_offset=r.last_stable,
            log_start_offset=r.log_start,
            aborted_transactions=tuple(
                build(aborted_class, producer_id=pid, first_offset=first)
                for pid, first, _ in r.aborted
            ),
            preferred_read_replica=-1,
            records=b"".join(r.batches),
            **tagged,
        )

    responses = tuple(
        build(
            topic_class,
            topic=name,
            topic_id=getattr(t, "topic_id", None),
            partitions=tuple(
                partition(name, getattr(t, "topic_id", None), p.partition) for p in t.partitions
            ),
        )
        for name, t in zip(names, body.topics, strict=True)
    )
    fenced = leader_hints and any(isinstance(r.error, FencedLeaderEpoch) for r in results.values())
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,  # no incremental fetch sessions: clients keep sending full fetches
        responses=responses,
        # KIP-951: the endpoints of the leaders named in current_leader, i.e. this broker.
        node_endpoints=(
            broker_entries(
                broker, schema_class(schema, "NodeEndpoint"), request.connection.listener
            )
            if fenced
            else ()
        ),
    )
