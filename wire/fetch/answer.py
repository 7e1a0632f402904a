"""The answers of Fetch requests, encoded partition by partition (wire/protocol/fast_responses.py),
or built as kio entities when a partition has a tagged field to say; and the sessionless
long poll answered from the connection's last answer (wire/fetch/memo.py)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafkaesque.errors import FencedLeaderEpoch
from kafkaesque.partition.fetch_changed import fetch_changed
from kafkaesque.partition.read_types import Fetched, ReadCache
from wire.broker import Broker
from wire.errors import error_code
from wire.fetch.memo import FetchMemo, Plan
from wire.fetch.sessions import INVALID_SESSION_ID
from wire.protocol.codec import NO_THROTTLE, Request, build, ok_response, schema_class
from wire.protocol.fast_responses import EncodedTopic, FetchAnswer, fetch_partition
from wire.topics import broker_entries

if TYPE_CHECKING:
    from wire.protocol.fetch_request import FetchBody
    from wire.protocol.kio_types import FetchPartitionData, FetchResponse

LEADER_HINT_VERSION = 16  # current_leader and node_endpoints (KIP-951)
READ_COMMITTED = 1  # isolation_level (v4+)
_PARTITION = attrgetter("partition")


async def planned_fetch(
    broker: Broker, request: Request[FetchBody], memo: FetchMemo, plan: Plan, cache: ReadCache
) -> FetchAnswer | FetchResponse:
    """A sessionless long poll answered from the connection's last answer: only the
    partitions that changed, or may have, are read and encoded (see wire/fetch/memo.py)."""
    body, version = request.body, request.api_version
    committed = body.isolation_level == READ_COMMITTED
    try:
        results = await fetch_changed(
            broker.partitions,
            cache,
            plan,
            plan.changed(),
            set(plan.by_name),
            max_bytes=body.max_bytes,
            min_bytes=body.min_bytes,
            max_wait=body.max_wait.total_seconds(),
            seen_epochs=request.connection.fetch_epochs,
            committed=committed,
        )
    except BaseException:
        # The appends it heard of may be taken and not answered: read the next whole.
        memo.topics = None
        raise
    leader_hints = version >= LEADER_HINT_VERSION
    several: dict[int, list[tuple[int, list[bytes]]]] = {}  # per topic: entries of pieces
    for t, at, r in plan.answered(results, committed):
        if _tagged(r, leader_hints):
            memo.topics = None  # the next request is read whole and kept again
            whole = [
                (t.memo.name, t.memo.topic_id, list(map(_PARTITION, t.requests)), t.answers)
                for t in plan.topics
            ]
            return entity_answer(broker, request, INVALID_SESSION_ID, whole)
        entry = _entry(version, t.requests[at].partition, r)
        if len(entry) == 1:
            t.pieces[at] = entry[0]
        else:  # records kept apart: never reused (the partition is unsettled)
            t.pieces[at] = b""
            several.setdefault(id(t), []).append((at, entry))
    encoded = []
    for t in plan.topics:
        t.commit()
        pieces = list(t.pieces)
        for at, entry in sorted(several.get(id(t), ()), reverse=True):  # the last first
            pieces[at : at + 1] = entry
        encoded.append(EncodedTopic(t.memo.name, t.memo.topic_id, len(t.requests), pieces))
    return FetchAnswer(
        version, NO_THROTTLE, ErrorCode.none.value, INVALID_SESSION_ID, tuple(encoded)
    )


def _tagged(r: Fetched, leader_hints: bool) -> bool:
    """Whether a partition's answer has a tagged field to say (a diverging epoch, a fenced
    leader's hint): kio then builds the whole answer."""
    return r.diverging_epoch is not None or (
        leader_hints and isinstance(r.error, FencedLeaderEpoch)
    )


def _entry(version: int, index: int, r: Fetched) -> list[bytes]:
    """A partition's answer, encoded (its records as a piece of their own when any)."""
    return fetch_partition(
        version,
        index,
        error_code(r.error).value,
        r.high_watermark,
        r.last_stable,
        r.log_start,
        r.aborted,
        r.batches,
    )


# The memo's entries of a topic when there is no memo: none (only read).
_NO_ENTRIES: dict[int, tuple[Fetched, bytes]] = {}

Answered = Sequence[tuple[str | None, uuid.UUID | None, Sequence[int], Sequence[Fetched]]]


def answer(
    broker: Broker,
    request: Request[FetchBody],
    session_id: int,
    topics: Answered,
    memo: FetchMemo | None = None,
    entries: list[list[bytes]] | None = None,
) -> FetchAnswer | FetchResponse:
    """The response naming these topics' partitions (name, id, partition indexes, and
    their outcomes in the same order). Encoded here, partition by partition (``memo``
    keeps the entries of partitions with nothing new; ``entries`` gets, per topic, each
    partition's entry, b"" for one of several pieces); a partition with a tagged field to
    say (a diverging epoch, a fenced leader's hint) has the whole answer built by kio."""
    version = request.api_version
    leader_hints = version >= LEADER_HINT_VERSION
    encoded = []
    for name, topic_id, indexes, outcomes in topics:
        pieces: list[bytes] = []
        single: list[bytes] = []
        if entries is not None:
            entries.append(single)
        kept = None if memo is None or name is None else memo.entries.setdefault(name, {})
        get = kept.get if kept is not None else _NO_ENTRIES.get
        for index, r in zip(indexes, outcomes, strict=True):
            found = get(index)
            if found is not None and found[0] is r:
                pieces.append(found[1])
                single.append(found[1])
                continue
            if _tagged(r, leader_hints):
                return entity_answer(broker, request, session_id, topics)
            entry = _entry(version, index, r)
            pieces += entry
            single.append(entry[0] if len(entry) == 1 else b"")
            if kept is not None and not r.batches and r.error is None:
                kept[index] = (r, entry[0])
        encoded.append(EncodedTopic(name, topic_id, len(indexes), pieces))
    return FetchAnswer(version, NO_THROTTLE, ErrorCode.none.value, session_id, tuple(encoded))


def entity_answer(
    broker: Broker, request: Request[FetchBody], session_id: int, topics: Answered
) -> FetchResponse:
    """The response as kio entities, for answers with tagged fields to write."""
    schema = request.response_class
    topic_class, partition_class = request.response_entities(
        "FetchableTopicResponse", "PartitionData"
    )
    leader_hints = request.api_version >= LEADER_HINT_VERSION
    aborted_class = schema_class(schema, "AbortedTransaction")

    def partition(index: int, r: Fetched) -> FetchPartitionData:
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
            topic_id=topic_id,
            partitions=tuple(
                partition(index, r) for index, r in zip(indexes, outcomes, strict=True)
            ),
        )
        for name, topic_id, indexes, outcomes in topics
    )
    fenced = leader_hints and any(
        isinstance(r.error, FencedLeaderEpoch) for _, _, _, outcomes in topics for r in outcomes
    )
    return ok_response(
        schema,
        session_id=session_id,
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
