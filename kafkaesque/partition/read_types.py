"""What a multi-partition read asks and answers, and what it remembers between reads.

``FetchRequest`` and ``Fetched`` are one partition of a read (``Partitions.fetch``).
``AppendWait`` watches topics for appends (kafkaesque/hot/notify.py) and says which partitions
grew; ``ReadCache`` keeps, for a fetch session or a connection, the partitions read to
their end, so a long poll does not read them again until an append to them is heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kafkaesque.errors import KafkaesqueError
from kafkaesque.hot.notify import Notifier
from kafkaesque.types import TopicPartition

NO_EPOCH = -1  # a client that does not send its leader epoch


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """One partition of a multi-partition read."""

    topic: str
    partition: int
    offset: int
    max_bytes: int
    current_leader_epoch: int = NO_EPOCH
    # The epoch of the last record the client read (Fetch v12+), to detect divergence.
    last_fetched_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class Fetched:
    """One partition's outcome of a multi-partition read."""

    error: KafkaesqueError | None = None
    high_watermark: int = -1
    log_start: int = -1
    batches: list[bytes] = field(default_factory=list)
    leader_epoch: int = NO_EPOCH  # the partition's, when it was read
    # (epoch, end offset) where the client's log diverges from this one: it must truncate
    # to there before fetching on (Fetch v12+); no batches then.
    diverging_epoch: tuple[int, int] | None = None
    # The first offset of the oldest open transaction, else the high watermark; -1 unknown.
    last_stable: int = -1
    # READ_COMMITTED: (producer id, first offset, ABORT marker's offset) of the aborted
    # transactions overlapping the batches.
    aborted: list[tuple[int, int, int]] = field(default_factory=list)


class AppendWait:
    """A registered watch for appends to some topics (see ``Partitions.appends``): which
    partitions grew since the last ``take``."""

    def __init__(self, notifier: Notifier | None, topics: set[str]) -> None:
        self._notifier = notifier
        self._topics = set(topics)
        # By topic: the partitions heard of, each with the largest log end heard (-1: not
        # told); ALL: any partition may have grown.
        self._grown: dict[str, dict[int, int] | All] = {}
        self._event = asyncio.Event()
        if notifier is not None:
            notifier.watch(topics, self._heard)

    def _heard(self, topic: str, message: str | None) -> None:
        """An append's message is "PARTITION:LOG_END"; without one, any partition may
        have grown."""
        partition, colon, end = (message or "").partition(":")
        grown = self._grown.setdefault(topic, {})
        if not (colon and partition.isdigit()):
            self._grown[topic] = ALL
        elif isinstance(grown, dict):
            heard = int(end) if end.isdigit() else -1
            key = int(partition)
            grown[key] = max(grown.get(key, -1), heard) if heard >= 0 else -1
        self._event.set()

    async def wait(self, timeout: float) -> bool:
        """True once an append arrived since the last ``take`` (at once if one did), False
        after ``timeout`` seconds without one."""
        if self._notifier is None:
            await asyncio.sleep(timeout)
            return False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._event.wait()
        return self._event.is_set()

    def take(self) -> dict[str, dict[int, int] | All]:
        """The partitions that grew since the last call, by topic."""
        grown, self._grown = self._grown, {}
        self._event.clear()
        return grown

    def add(self, topics: set[str]) -> None:
        """Watch these topics too."""
        new = topics - self._topics
        if new:
            self._topics |= new
            if self._notifier is not None:
                self._notifier.watch(new, self._heard)

    def discard(self) -> None:
        if self._notifier is not None:
            self._notifier.unwatch(self._topics, self._heard)


class Leaders(Protocol):
    """kafkaesque.partition.leadership.Leadership as the cache sees it: a new ``leaders`` dict after
    every reconcile."""

    leaders: dict[TopicPartition, int]

    def check(self, topic: str, partition: int) -> KafkaesqueError | None: ...


def settled(r: FetchRequest, fetched: Fetched, committed: bool) -> bool:
    """A partition read to its end with nothing to answer but its offsets: its answer
    stays good until an append to it (or a change of its topic) is heard."""
    end = fetched.last_stable if committed else fetched.high_watermark
    return (
        fetched.error is None
        and not fetched.batches
        and fetched.diverging_epoch is None
        and r.offset == end
    )


class ReadCache:
    """A fetch session's memory of its partitions between fetches (KIP-227 lets a broker
    keep one): a partition read to its end with nothing to answer is not read again
    until an append to it is heard, so a consumer of 10,000 quiet partitions costs Redis
    only the partitions that change. Its watch lives as long as the cache, so no append
    between two fetches goes unheard; what pub/sub may still miss (a Redis reconnect,
    retention moving a log start) is read again after ``refresh`` seconds, at most
    ``refresh_batch`` partitions per read: the partitions a first fetch read together
    would otherwise all be read again together, 0.5 s for 10,000 of them, which an
    append arriving meanwhile waits out."""

    def __init__(
        self, notifier: Notifier | None, refresh: float = 5.0, refresh_batch: int = 256
    ) -> None:
        self._notifier = notifier
        self._refresh = refresh
        self._refresh_batch = refresh_batch
        self._watch = AppendWait(notifier, set())
        # (topic, partition) -> the request that read it, the answer, when (monotonic),
        # under READ_COMMITTED or not; oldest first (``due`` finds the stale at the front).
        self._known: dict[TopicPartition, tuple[FetchRequest, Fetched, float, bool]] = {}
        self._leaders: dict[TopicPartition, int] | None = None  # as last checked

    @property
    def heard(self) -> bool:
        """Appends are heard (else ``known`` vouches for nothing)."""
        return self._notifier is not None

    def watching(self, topics: set[str]) -> AppendWait:
        """The cache's watch, over ``topics`` too from now on."""
        self._watch.add(topics)
        return self._watch

    def known(
        self,
        requests: Sequence[FetchRequest],
        grown: dict[str, dict[int, int] | All],
        committed: bool,
    ) -> tuple[dict[TopicPartition, Fetched | None], list[FetchRequest]]:
        """Every requested partition in order, with its answer when it is still good
        (asked the same way and isolation, read within ``refresh`` seconds, no append
        heard since: ``grown`` is AppendWait.take()) or None; and the requests to read."""
        for topic, heard in grown.items():
            if isinstance(heard, All):
                for tp in [tp for tp in self._known if tp[0] == topic]:
                    del self._known[tp]
            else:
                for partition in heard:
                    self._known.pop((topic, partition), None)
        oldest = time.monotonic() - self._refresh
        results: dict[TopicPartition, Fetched | None] = {}
        missing = []
        known = self._known
        if self._notifier is None:  # nothing would tell it of appends: read everything
            known.clear()
        get = known.get
        stale = self._refresh_batch  # read again this many past their refresh, at most
        for r in requests:
            tp = r.topic, r.partition
            entry = get(tp)
            if entry is not None and (entry[0] is r or entry[0] == r) and entry[3] == committed:
                if entry[2] >= oldest:
                    results[tp] = entry[1]
                    continue
                if stale <= 0:  # its turn comes in a later read
                    results[tp] = entry[1]
                    continue
                stale -= 1
            results[tp] = None
            missing.append(r)
        return results, missing

    def due(self) -> list[TopicPartition]:
        """The partitions whose answers passed their ``refresh``, oldest first, at most
        ``refresh_batch`` (``known`` reads them again): found without a pass over all."""
        oldest = time.monotonic() - self._refresh
        found: list[TopicPartition] = []
        for tp, entry in self._known.items():
            if entry[2] >= oldest or len(found) >= self._refresh_batch:
                break
            found.append(tp)
        return found

    def forget_heard(
        self, grown: dict[str, dict[int, int] | All], asks: Callable[[str, int], bool]
    ) -> None:
        """Forget the partitions in ``grown`` (appends heard while a long poll waited)
        that the read at hand does not ``asks``: it reads again only those it asks, and a
        later read must not take the others' old answers as current."""
        for topic, heard in grown.items():
            if isinstance(heard, All):
                for tp in [tp for tp in self._known if tp[0] == topic and not asks(*tp)]:
                    del self._known[tp]
                continue
            for partition in heard:
                if not asks(topic, partition):
                    self._known.pop((topic, partition), None)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._known.pop(tp, None)

    def lapsed(self, leadership: Leaders | None) -> list[TopicPartition]:
        """Forget the answers of partitions another broker leads now (their fetch is
        answered NOT_LEADER); they are returned. A pass over the cache only when the
        leaders changed (a new ``leaders`` dict, every reconcile)."""
        if leadership is None or leadership.leaders is self._leaders:
            return []
        self._leaders = leadership.leaders
        gone = [tp for tp in self._known if leadership.check(*tp) is not None]
        self.forget(gone)
        return gone

    def remember(
        self,
        requests: Sequence[FetchRequest],
        results: dict[TopicPartition, Fetched],
        committed: bool,
    ) -> None:
        """Keep the answers of partitions read to their end without an error; forget the
        others (they will be read again). An answer taken from the cache keeps its time."""
        now = time.monotonic()
        known = self._known
        get = known.get
        # Those not answered from the cache, found by a cheap pass over the results (a
        # long poll of 10,000 quiet partitions reads a handful); then their requests.
        changed = {
            tp for tp, fetched in results.items() if (e := get(tp)) is None or e[1] is not fetched
        }
        if not changed:
            return
        partitions = {p for _, p in changed}
        for r in requests:
            if r.partition not in partitions:
                continue
            tp = r.topic, r.partition
            if tp not in changed:
                continue
            fetched = results[tp]
            known.pop(tp, None)  # a new answer goes to the end: the order is by time
            if settled(r, fetched, committed):
                known[tp] = (r, fetched, now, committed)

    def close(self) -> None:
        self._watch.discard()
        self._known.clear()


class All:
    """Every partition of a topic may have grown."""


ALL = All()


def grown_requests(
    requests: Sequence[FetchRequest],
    grown: dict[str, dict[int, int] | All],
    results: Mapping[TopicPartition, Fetched | None],
) -> list[FetchRequest]:
    """The requests, in order, of partitions that may hold more than ``results`` read of
    them: an append to them was heard that the read did not see (an event heard twice,
    from this process and through Redis, or one the read already saw, reads nothing
    again)."""
    if any(isinstance(heard, All) for heard in grown.values()):
        return [r for r in requests if r.topic in grown]
    wanted: dict[int, set[str]] = {}  # partition -> topics: no tuple per request below
    for topic, heard in grown.items():
        for partition, end in heard.items():  # type: ignore[union-attr]
            read = results.get((topic, partition))
            if read is not None and (end < 0 or end > read.high_watermark):
                wanted.setdefault(partition, set()).add(topic)
    if not wanted:
        return []
    return [r for r in requests if r.partition in wanted and r.topic in wanted[r.partition]]
