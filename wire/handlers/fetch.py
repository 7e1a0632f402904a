"""Fetch: whole batches as stored, long-polling until min_bytes arrive or max_wait passes.

isolation_level READ_COMMITTED gets only whole batches below the last stable offset and
the aborted transactions among them, whose records the client drops itself, as Kafka's
brokers answer; READ_UNCOMMITTED gets everything up to the high watermark.

v12 tells a client whose log diverged where to truncate (diverging_epoch), v13 names topics
by id, v16 points a fenced client at the current leader (KIP-951).

Fetch sessions (KIP-227, v7+; wire/fetch/sessions.py): session_epoch -1 is a full fetch
without a session (closing the one named, if any); 0 a full fetch that opens one, whose id
the answer gives (0 when the cache has no slot for it). Then epochs 1, 2, ... are
incremental: the request names only the partitions added or changed and those forgotten,
the broker reads all the session's partitions in one long-poll and answers only those with
records, an error, or a high watermark, last stable offset or log start offset changed
since its last answer. An unknown session id is answered FETCH_SESSION_ID_NOT_FOUND, a
wrong epoch INVALID_FETCH_SESSION_EPOCH, a session by topic names continued by topic ids
(or the reverse) FETCH_SESSION_TOPIC_ID_ERROR, all with no partitions; the client then
opens a new session. Authorization is checked on every fetch, of every partition read.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kafkaesque.errors import TopicAuthorizationFailed, UnknownTopicId
from kafkaesque.partition.read_types import Fetched, FetchRequest, ReadCache
from wire.authorize import Operation, topics_allowed
from wire.broker import Broker
from wire.fetch.answer import (
    READ_COMMITTED,
    answer,
    planned_fetch,
)
from wire.fetch.memo import FetchMemo, make_request
from wire.fetch.sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
    Topic,
    next_epoch,
)
from wire.protocol.codec import NO_THROTTLE, Request, build
from wire.protocol.fast_responses import FetchAnswer
from wire.protocol.fetch_request import FetchBody, FetchPartition, FetchTopic

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        FetchResponse,
    )

log = logging.getLogger(__name__)

SESSIONS_VERSION = 7  # session_id and session_epoch (KIP-227)
TOPIC_IDS_VERSION = 13  # topics named by id only
_PARTITION = attrgetter("partition")
# Partitions up to which a sessionless fetch is not kept for the next one (FetchMemo): a
# fetch of one partition spent a quarter of its time keeping and comparing it.
SMALL_FETCH = 8

# A partition to read: its topic's name (None for an unknown topic id), its topic id (v13+),
# and what is asked of it.
Wanted = tuple[str | None, uuid.UUID | None, CachedPartition]


async def topic_name(broker: Broker, topic: FetchTopic, version: int) -> str | None:
    """The name of a requested topic; None for an unknown topic id."""
    if version < TOPIC_IDS_VERSION:
        return topic.topic
    return None if topic.topic_id is None else await broker.topic_ids.name(topic.topic_id.bytes)


def asked(topic: FetchTopic, p: FetchPartition, version: int) -> CachedPartition:
    """A requested partition, as a session caches it."""
    return CachedPartition(
        topic.topic_id if version >= TOPIC_IDS_VERSION else topic.topic,
        p.partition,
        p.fetch_offset,
        p.partition_max_bytes,
        p.current_leader_epoch,  # v9+, else -1
        p.last_fetched_epoch,  # v12+, else -1
    )


async def fetch(broker: Broker, request: Request[FetchBody]) -> FetchResponse | FetchAnswer:
    body, version = request.body, request.api_version
    # v7+; before, INVALID_SESSION_ID and FINAL_EPOCH: no session.
    session_id, session_epoch = body.session_id, body.session_epoch
    sessions = broker.fetch_sessions
    if session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID and sessions.remove(session_id) is not None:
            log.debug("fetch session %d closed by a full fetch", session_id)
        return await full_fetch(broker, request, open_session=session_epoch == INITIAL_EPOCH)
    session = sessions.get(session_id)
    if session is None:
        log.debug("incremental fetch of an unknown fetch session %d", session_id)
        return refusal(request, ErrorCode.fetch_session_id_not_found)
    if session.epoch != session_epoch:
        log.debug(
            "fetch session %d expects epoch %d, not %d", session_id, session.epoch, session_epoch
        )
        return refusal(request, ErrorCode.invalid_fetch_session_epoch)
    if session.by_topic_id != (version >= TOPIC_IDS_VERSION):
        return refusal(request, ErrorCode.fetch_session_topic_id_error)
    return await incremental_fetch(broker, request, session)


async def full_fetch(
    broker: Broker, request: Request[FetchBody], open_session: bool
) -> FetchResponse | FetchAnswer:
    """Every requested partition, answered; a new session of them if ``open_session``."""
    body, version = request.body, request.api_version
    names = [await topic_name(broker, t, version) for t in body.topics]
    sessions = broker.fetch_sessions
    opening = open_session and version >= SESSIONS_VERSION and sessions.slots > 0
    if not opening:
        # Clients without sessions send every partition each time (librdkafka: 10,000 of
        # them): the connection keeps what its last fetches read and answered, as a
        # session would, and nothing is built per partition that did not change.
        connection = request.connection
        if connection.read_cache is None:
            connection.read_cache = sessions.read_cache()
        cache = connection.read_cache
        # A fetch of a few partitions is read as it comes: keeping it to compare the next
        # one with costs more than it saves. The memo kept before it is dropped: this
        # fetch takes the appends the connection heard, so a long poll planned from the
        # memo would answer a partition that grew meanwhile as it was.
        memo = None
        if sum(t.count for t in body.topics) <= SMALL_FETCH:
            connection.fetch_memo = None
        else:
            memo = connection.fetch_memo
            if memo is None or memo.version != version:
                memo = connection.fetch_memo = FetchMemo(version)
        # A long poll whose request is the last one but for a few entries (librdkafka's
        # next fetch) is answered from the last answer: its work follows the changes.
        if (
            memo is not None
            and cache is not None
            and cache.heard
            and body.max_wait.total_seconds() > 0
        ):
            plan = memo.plan(names, body) if body.min_bytes > 0 else None
            if plan is not None:
                planned = set(plan.by_name)
                if topics_allowed(broker, request, Operation.READ, planned) == planned:
                    return await planned_fetch(broker, request, memo, plan, cache)
        asks = [
            (
                name,
                t.topic_id,
                memo.requests(name, t)
                if memo is not None
                else [make_request(name or "", t.layout, raw) for raw in t.entries],
            )
            for name, t in zip(names, body.topics, strict=True)
        ]
        outcomes = await read_topics(broker, request, asks, cache)
        topics = [
            (name, topic_id, list(map(_PARTITION, reqs)), fetched)
            for (name, topic_id, reqs), fetched in zip(asks, outcomes, strict=True)
        ]
        entries: list[list[bytes]] = []
        response = answer(broker, request, INVALID_SESSION_ID, topics, memo, entries)
        if memo is not None:
            memo.keep(
                names,
                body,
                [reqs for _, _, reqs in asks],
                outcomes,
                entries if isinstance(response, FetchAnswer) else None,
            )
        return response
    wanted = [
        (name, t.topic_id, asked(t, p, version))
        for name, t in zip(names, body.topics, strict=True)
        for p in t.partitions
    ]
    cache = sessions.read_cache()  # a session's read cache starts with the read that opens it
    try:
        results = await read(broker, request, wanted, cache)
    except BaseException:
        if cache is not None:
            cache.close()
        raise
    for (_, _, cached), fetched in zip(wanted, results, strict=True):
        cached.answered(fetched)
    by_id = version >= TOPIC_IDS_VERSION
    session_id = sessions.create(by_id, (c for _, _, c in wanted), cache)
    if session_id == INVALID_SESSION_ID:
        log.debug("no fetch session slot free for %d partitions", len(wanted))
    else:
        log.debug("fetch session %d opened with %d partitions", session_id, len(wanted))
    # Topics as the request has them, each with its partitions in the request's order.
    answers = iter(results)
    grouped = []
    for name, t in zip(names, body.topics, strict=True):
        at_p = t.layout.partition
        indexes = [raw[at_p] for raw in t.entries]
        grouped.append((name, t.topic_id, indexes, [next(answers) for _ in indexes]))
    return answer(broker, request, session_id, grouped)


async def incremental_fetch(
    broker: Broker, request: Request[FetchBody], session: FetchSession
) -> FetchResponse | FetchAnswer:
    """Apply the request to the session, read all its partitions, answer the changed ones."""
    body, version = request.body, request.api_version
    sessions = broker.fetch_sessions
    by_id = session.by_topic_id
    session.update(
        (asked(t, p, version) for t in body.topics for p in t.partitions),
        (
            (t.topic_id if by_id else t.topic, index)
            for t in body.forgotten_topics_data
            for index in t.partitions
        ),
    )
    if not session.partitions:
        # As Kafka: a session left with no partitions closes; the answer says so.
        sessions.remove(session.id)
        log.debug("fetch session %d closed: no partitions left", session.id)
        return answer(broker, request, INVALID_SESSION_ID, [])
    sessions.touch(session)
    session.epoch = expected = next_epoch(session.epoch)
    names: dict[Topic, str | None] = {}  # of the session's topics
    for cached in session.partitions.values():
        topic = cached.topic
        if topic in names:
            continue
        if not isinstance(topic, uuid.UUID):
            names[topic] = None if by_id else topic
        else:
            names[topic] = await broker.topic_ids.name(topic.bytes)
    wanted = [
        (names[c.topic], c.topic if isinstance(c.topic, uuid.UUID) else None, c)
        for c in session.partitions.values()
    ]
    results = await read(broker, request, wanted, session.read_cache)
    if sessions.get(session.id) is not session or session.epoch != expected:
        # Another fetch of this session (a duplicate of this epoch) came meanwhile.
        log.info("fetch session %d moved on during a fetch of its epoch", session.id)
        return refusal(request, ErrorCode.invalid_fetch_session_epoch, session.id)
    sessions.incremental_fetches += 1
    grouped: dict[Topic, list[tuple[Wanted, Fetched]]] = {}  # topics in the order answered
    heads: dict[Topic, tuple[str | None, uuid.UUID | None]] = {}
    for entry, fetched in zip(wanted, results, strict=True):
        cached = entry[2]
        if cached.key not in session.partitions or not cached.answered(fetched):
            continue
        session.to_back(cached.key)
        heads.setdefault(cached.topic, (entry[0], entry[1]))
        grouped.setdefault(cached.topic, []).append((entry, fetched))
    log.debug(
        "incremental fetch of session %d (%d partitions): %d answered",
        session.id,
        len(session.partitions),
        sum(len(g) for g in grouped.values()),
    )
    topics = [
        (*heads[topic], [e[2].partition for e, _ in entries], [f for _, f in entries])
        for topic, entries in grouped.items()
    ]
    return answer(broker, request, session.id, topics)


async def read(
    broker: Broker,
    request: Request[FetchBody],
    wanted: Sequence[Wanted],
    cache: ReadCache | None = None,
) -> list[Fetched]:
    """The outcome of each wanted partition, in order: one read of all that may be read,
    so that min_bytes and max_wait cover them all; ``cache``: a session's (see ReadCache)."""
    asks = [
        (
            name,
            topic_id,
            [
                FetchRequest(
                    name or "",
                    c.partition,
                    c.fetch_offset,
                    c.max_bytes,
                    c.current_leader_epoch,
                    c.last_fetched_epoch,
                )
            ],
        )
        for name, topic_id, c in wanted
    ]
    return [fetched for (fetched,) in await read_topics(broker, request, asks, cache)]


async def read_topics(
    broker: Broker,
    request: Request[FetchBody],
    asks: Sequence[tuple[str | None, uuid.UUID | None, Sequence[FetchRequest]]],
    cache: ReadCache | None = None,
) -> list[list[Fetched]]:
    """Per topic (its name, None for an unknown topic id; its id; its partitions' requests),
    the outcome of each partition, in order: one read of all that may be read."""
    body = request.body
    readable = topics_allowed(broker, request, Operation.READ, {n for n, _, _ in asks if n})
    if len(asks) == 1 and asks[0][0] in readable:
        requests = asks[0][2]  # librdkafka's 10,000 partitions of one topic: no copy
    else:
        requests = [r for name, _, reqs in asks if name in readable for r in reqs]
    results = await broker.partitions.fetch(
        requests,
        max_bytes=body.max_bytes,
        min_bytes=body.min_bytes,
        max_wait=body.max_wait.total_seconds(),
        # A client that sends no leader epoch is told of truncation by this connection's
        # memory of the epochs it read at.
        seen_epochs=request.connection.fetch_epochs,
        committed=body.isolation_level == READ_COMMITTED,
        cache=cache,
    )
    outcomes = []
    for name, topic_id, reqs in asks:
        if name is None:
            refused = Fetched(UnknownTopicId(f"no topic has the id {topic_id}"))
            outcomes.append([refused] * len(reqs))
        elif name not in readable:
            refused = Fetched(TopicAuthorizationFailed(f"Not authorized to READ topic {name}"))
            outcomes.append([refused] * len(reqs))
        else:
            # C loops, not Python ones: 10,000 partitions here for librdkafka.
            outcomes.append(
                list(map(results.__getitem__, zip(repeat(name), map(_PARTITION, reqs))))
            )
    return outcomes


def refusal(
    request: Request[FetchBody], error: ErrorCode, session_id: int = INVALID_SESSION_ID
) -> FetchResponse:
    """The answer to a fetch its session refuses: the error, no partitions."""
    return build(
        request.response_class,
        throttle_time=NO_THROTTLE,
        error_code=error,
        session_id=session_id,
        responses=(),
        node_endpoints=(),
    )
