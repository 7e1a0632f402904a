"""Incremental fetch sessions (KIP-227), kept in memory by each broker process.

A full fetch with session_epoch 0 opens a session: the broker remembers every partition it
named (fetch offset, partition max bytes, leader epochs) and what the answer said of each
(high watermark, last stable offset, log start offset). Then the client sends incremental
fetches, epoch 1, 2, ...: only the partitions it adds or whose fetch offset it moved, and
those it forgets; the broker reads all the session's partitions and answers only those
with records, an error, or offsets changed since its last answer.

The cache has ``slots`` sessions at most (Kafka's max.incremental.fetch.session.cache.slots).
A new session takes the slot of one idle longer than ``eviction_ms`` (Kafka's
min.incremental.fetch.session.eviction.ms), else of the one with the fewest partitions
among those older than that, if the new one has more; else it is not created and the
client goes on with full fetches (the answer says session 0). Sessions outlive connections,
as Kafka's do: a client reconnecting goes on with its session.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kafkaesque.partition.read_types import Fetched, ReadCache

INVALID_SESSION_ID = 0  # no session: the answer of a sessionless (or refused) fetch
INITIAL_EPOCH = 0  # a full fetch opening a session
FINAL_EPOCH = -1  # a full fetch without a session (closing the one named)
MAX_EPOCH = 2**31 - 1
DEFAULT_SLOTS = 1000  # Kafka's max.incremental.fetch.session.cache.slots
DEFAULT_EVICTION_MS = 120_000  # Kafka's min.incremental.fetch.session.eviction.ms

# A cached partition's key: (topic name, partition), or (topic id, partition) in a session
# of Fetch v13+, which names topics by id.
Topic = str | uuid.UUID | None
Key = tuple[Topic, int]


def next_epoch(epoch: int) -> int:
    """The session epoch after ``epoch``: 1 after the largest int32, as Kafka counts."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session: what the client last asked of it and what the broker last
    answered of it (-1: nothing yet, or an error, so that the next answer names it)."""

    topic: Topic  # the name, or in a session by topic ids the id (None: no id was sent)
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    high_watermark: int = -1
    last_stable: int = -1
    log_start: int = -1

    @property
    def key(self) -> Key:
        return self.topic, self.partition

    def asked(self, other: CachedPartition) -> None:
        """Take the request's parameters of an incremental fetch naming this partition."""
        self.fetch_offset = other.fetch_offset
        self.max_bytes = other.max_bytes
        self.current_leader_epoch = other.current_leader_epoch
        self.last_fetched_epoch = other.last_fetched_epoch

    def answered(self, fetched: Fetched) -> bool:
        """Whether an incremental answer must name this partition (records, an error, a
        diverging epoch, or offsets it last said otherwise); remembers what it says."""
        changed = (fetched.high_watermark, fetched.last_stable, fetched.log_start) != (
            self.high_watermark,
            self.last_stable,
            self.log_start,
        )
        self.high_watermark = fetched.high_watermark
        self.last_stable = fetched.last_stable
        self.log_start = fetched.log_start
        if fetched.error is not None:
            # As Kafka: forget the offsets, so the partition is named again once it heals.
            self.high_watermark = self.last_stable = self.log_start = -1
            return True
        return changed or bool(fetched.batches) or fetched.diverging_epoch is not None


@dataclass(slots=True, eq=False)
class FetchSession:
    id: int
    by_topic_id: bool  # opened by Fetch v13+: its partitions are keyed by topic id
    created: float  # monotonic seconds
    last_used: float
    epoch: int = 1  # the epoch the next incremental fetch must carry
    # Read in this order; a partition answered moves to the end, so that under max_bytes
    # the others get their turn (as Kafka).
    partitions: dict[Key, CachedPartition] = field(default_factory=dict)
    # Partitions read to their end are not read again until an append to them is heard.
    read_cache: ReadCache | None = None

    def close(self) -> None:
        if self.read_cache is not None:
            self.read_cache.close()

    def update(self, asked: Iterable[CachedPartition], forgotten: Iterable[Key]) -> None:
        """An incremental fetch: add or update the partitions it names, drop the forgotten
        ones (a partition the session does not have is ignored)."""
        for p in asked:
            cached = self.partitions.get(p.key)
            if cached is None:
                self.partitions[p.key] = p
            else:
                cached.asked(p)
        for key in forgotten:
            self.partitions.pop(key, None)

    def to_back(self, key: Key) -> None:
        self.partitions[key] = self.partitions.pop(key)


class FetchSessionCache:
    """The broker's sessions by id, least recently used first."""

    def __init__(
        self,
        slots: int = DEFAULT_SLOTS,
        eviction_ms: int = DEFAULT_EVICTION_MS,
        clock: Callable[[], float] = time.monotonic,
        read_cache: Callable[[], ReadCache | None] = lambda: None,
    ) -> None:
        self.slots = slots
        self.read_cache = read_cache  # a new session's
        self.eviction = eviction_ms / 1000
        self.clock = clock
        self._sessions: dict[int, FetchSession] = {}
        # Counters, for the metrics.
        self.evictions = 0
        self.incremental_fetches = 0  # incremental fetches answered within a session
        self.refused = 0  # sessions not created for want of a slot

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def partitions(self) -> int:
        """Partitions cached in all sessions (Kafka's NumIncrementalFetchPartitionsCached)."""
        return sum(len(s.partitions) for s in self._sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()
        return session

    def close(self) -> None:
        """Shutting down: every session goes."""
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()

    def touch(self, session: FetchSession) -> None:
        """The session was used now: it moves to the most recently used end."""
        session.last_used = self.clock()
        self._sessions.pop(session.id, None)
        self._sessions[session.id] = session

    def create(
        self,
        by_topic_id: bool,
        partitions: Iterable[CachedPartition],
        read_cache: ReadCache | None = None,
    ) -> int:
        """A new session of these partitions (with ``read_cache``, that read them, else a
        new one); its id, or INVALID_SESSION_ID when no slot is free and none can be taken
        (then ``read_cache`` is closed)."""
        cached = {p.key: p for p in partitions}
        now = self.clock()
        if len(self._sessions) >= self.slots and not self._evict(len(cached), now):
            self.refused += 1
            if read_cache is not None:
                read_cache.close()
            return INVALID_SESSION_ID
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = 1 + secrets.randbelow(MAX_EPOCH)  # 1 .. 2**31 - 1
        self._sessions[session_id] = FetchSession(
            session_id, by_topic_id, now, now, 1, cached, read_cache or self.read_cache()
        )
        return session_id

    def _evict(self, size: int, now: float) -> bool:
        """Free a slot for a session of ``size`` partitions (Kafka's rule): the least
        recently used session if idle past the eviction time, else the smallest of those
        created before it, if smaller than the new one (the least recently used of equals)."""
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if now - oldest.last_used > self.eviction:
            victim: FetchSession | None = oldest
        else:
            settled = (s for s in self._sessions.values() if now - s.created > self.eviction)
            victim = min(settled, key=lambda s: len(s.partitions), default=None)
            if victim is not None and len(victim.partitions) >= size:
                victim = None
        if victim is None:
            return False
        self.remove(victim.id)
        self.evictions += 1
        return True
