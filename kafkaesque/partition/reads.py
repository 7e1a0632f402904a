"""The partition layer's reads (kafkaesque.partition.layer.Partitions inherits them): many
partitions within a byte budget in one round trip, the long-poll wait for appends, and
each partition's read checked as a client may take it (leader epochs, divergence, a lost
position, out of range)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from kafkaesque.errors import (
    FencedLeaderEpoch,
    KafkaesqueError,
    OffsetOutOfRange,
    StorageUnavailable,
    UnknownLeaderEpoch,
)
from kafkaesque.hot.log import Log
from kafkaesque.hot.log_types import ReadResult
from kafkaesque.hot.notify import Notifier
from kafkaesque.partition.leadership import Leadership
from kafkaesque.partition.read_types import (
    All,
    AppendWait,
    Fetched,
    FetchRequest,
    ReadCache,
    grown_requests,
)
from kafkaesque.types import TopicPartition

if TYPE_CHECKING:
    from kafkaesque.partition.layer import TopicTraffic


def check_leader_epoch(requested: int, current: int) -> None:
    """A client's current leader epoch against the partition's (KIP-320): older is fenced,
    newer is one this broker does not know yet; -1 (not sent) is never checked."""
    if requested < 0 or requested == current:
        return
    if requested < current:
        raise FencedLeaderEpoch(f"leader epoch {requested} is older than {current}")
    raise UnknownLeaderEpoch(f"leader epoch {requested} is newer than {current}")


class ReadingPartitions:
    """Budgeted reads with a long-poll wait."""

    log: Log
    notifier: Notifier | None
    leadership: Leadership | None
    traffic: TopicTraffic | None

    async def read(
        self, topic: str, partition: int, offset: int, max_records: int, committed: bool = False
    ) -> ReadResult:
        """Whole batches from the one holding ``offset``, up to about ``max_records``
        records (see Log.read): the CLI's consumer reads by records, not bytes. With
        ``committed`` only below the last stable offset, with the aborted transactions."""
        return await self.log.read(
            topic, partition, offset, max_records=max_records, committed=committed
        )

    async def fetch(
        self,
        requests: Sequence[FetchRequest],
        max_bytes: int,
        min_bytes: int = 1,
        max_wait: float = 0.0,
        seen_epochs: dict[TopicPartition, int] | None = None,
        committed: bool = False,
        cache: ReadCache | None = None,
    ) -> dict[TopicPartition, Fetched]:
        """Read every partition within ``max_bytes`` in all; unless an error came or
        ``min_bytes`` arrived, wait up to ``max_wait`` seconds for appends and read again.
        ``committed`` (READ_COMMITTED): only below each partition's last stable offset; a
        transaction marker wakes the wait as an append does.

        ``seen_epochs`` remembers, for a client that sends no leader epoch, the epoch of
        its last read of each partition (see ``_lost_position``). ``cache`` (a fetch
        session's) keeps partitions read to their end between fetches: a fetch that may
        wait (``max_wait`` and ``min_bytes`` above 0, as clients' long polls) does not
        read them again until an append to them is heard."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait
        # The partitions read by this fetch, and their requests: the others were answered
        # from the cache, which holds only partitions read to their end without an error
        # (no bytes), so the long poll counts and remembers only these: a consumer of
        # 10,000 quiet partitions costs the few that changed, not a pass over all.
        fresh: dict[TopicPartition, Fetched] = {}
        results: dict[TopicPartition, Fetched | None]
        read: list[FetchRequest] = []
        async with contextlib.AsyncExitStack() as stack:
            if cache is None:
                appended = await stack.enter_async_context(self.appends(topics_of(requests)))
                fresh = await self.read_all(requests, max_bytes, seen_epochs, committed)
                results = dict(fresh)
            else:
                appended = cache.watching(topics_of(requests))
                grown = appended.take()
                cache.lapsed(self.leadership)  # those are read again: NOT_LEADER
                if max_wait > 0 and min_bytes > 0:
                    results, missing = cache.known(requests, grown, committed)
                else:
                    # Answered at once: an append in another process whose message has
                    # not arrived yet would wake nothing, so everything is read. (A long
                    # poll's wait is woken by that message.)
                    cache.known((), grown, committed)
                    results, missing = dict.fromkeys(keys_of(requests)), list(requests)
                if missing:
                    fresh = await self.read_all(missing, max_bytes, seen_epochs, committed)
                    results.update(fresh)
                    read = list(missing)

            def grew(grown: dict[str, dict[int, int] | All]) -> list[FetchRequest]:
                if cache is not None:
                    cache.forget_heard(grown, lambda t, p: (t, p) in results)
                return grown_requests(requests, grown, results)

            # As Kafka, a fetch of no partitions is answered at once: no append could
            # wake it (nor, at shutdown, the notifier).
            if requests:
                read += await self.long_poll(
                    appended,
                    deadline,
                    min_bytes,
                    grew,
                    fresh,
                    results,
                    max_bytes,
                    seen_epochs,
                    committed,
                )
        if cache is not None and read:
            cache.remember(read, fresh, committed)
        return results  # type: ignore[return-value]  # every partition has its answer

    async def long_poll(
        self,
        appended: AppendWait,
        deadline: float,
        min_bytes: int,
        grew: Callable[[dict[str, dict[int, int] | All]], list[FetchRequest]],
        fresh: dict[TopicPartition, Fetched],
        results: dict[TopicPartition, Fetched | None],
        max_bytes: int,
        seen_epochs: dict[TopicPartition, int] | None,
        committed: bool,
    ) -> list[FetchRequest]:
        """The wait of every long poll (Fetch, with or without a session): until
        ``min_bytes`` arrived (``fresh``: this fetch's reads) or the loop's ``deadline``,
        each append heard reads again, in one round trip within the budget left, the
        partitions ``grew`` names for it (those it grew past what was read); their
        answers replace theirs in ``fresh`` and ``results``. Returns the requests read."""
        loop = asyncio.get_running_loop()
        read: list[FetchRequest] = []
        while not self.closed and not enough(fresh.values(), min_bytes):
            timeout = deadline - loop.time()
            if timeout <= 0 or not await appended.wait(timeout):
                break  # nothing was appended: what we read is still current
            again = grew(appended.take())
            if not again:
                continue  # heard of appends this read saw already
            await self.read_again(again, fresh, results, max_bytes, seen_epochs, committed)
            read += again
        return read

    async def read_again(
        self,
        again: Sequence[FetchRequest],
        fresh: dict[TopicPartition, Fetched],
        results: dict[TopicPartition, Fetched | None],
        max_bytes: int,
        seen_epochs: dict[TopicPartition, int] | None,
        committed: bool,
    ) -> None:
        """Read again, in one round trip, the partitions of a long poll an append was
        heard for, within the budget the others' answers left (``fresh``: this fetch's
        reads so far); their answers replace theirs in ``fresh`` and ``results``."""
        regrown = {(r.topic, r.partition) for r in again}
        used = sum(fetched_size(f) for tp, f in fresh.items() if tp not in regrown)
        reread = await self.read_all(
            again, max_bytes - used, seen_epochs, committed, min_one=used == 0
        )
        results.update(reread)
        fresh.update(reread)

    @property
    def closed(self) -> bool:
        """Shutting down: waiting reads answer now with what they have."""
        return self.notifier is not None and self.notifier.closed

    @contextlib.asynccontextmanager
    async def appends(self, topics: Iterable[str]) -> AsyncIterator[AppendWait]:
        """Watch for appends to ``topics``; entered before reading, so an append racing
        with the read still wakes the wait."""
        wait = AppendWait(self.notifier, set(topics))
        try:
            yield wait
        finally:
            wait.discard()

    async def read_all(
        self,
        requests: Sequence[FetchRequest],
        max_bytes: int,
        seen_epochs: dict[TopicPartition, int] | None,
        committed: bool = False,
        min_one: bool = True,
    ) -> dict[TopicPartition, Fetched]:
        """Read every partition within the budget, in one Redis round trip."""
        refused: dict[TopicPartition, Fetched] = {}
        if self.leadership is not None:
            for r in requests:
                not_leader = self.leadership.check(r.topic, r.partition)
                if not_leader is not None:
                    refused[(r.topic, r.partition)] = Fetched(not_leader)
            if refused:
                requests = [r for r in requests if (r.topic, r.partition) not in refused]
        try:
            reads = await self.log.read_many(requests, max_bytes, committed, min_one)
        except StorageUnavailable as exc:  # Redis is away: each partition says so
            reads = [exc] * len(requests)
        fetched = {
            (r.topic, r.partition): (
                Fetched(read)
                if isinstance(read, KafkaesqueError)
                else await self._checked(r, read, seen_epochs)
            )
            for r, read in zip(requests, reads, strict=True)
        }
        return {**fetched, **refused} if refused else fetched

    def check_leader(self, topic: str, partition: int) -> None:
        """Raise NotLeader when another broker leads the partition."""
        if self.leadership is not None:
            not_leader = self.leadership.check(topic, partition)
            if not_leader is not None:
                raise not_leader

    async def _checked(
        self, r: FetchRequest, result: ReadResult, seen_epochs: dict[TopicPartition, int] | None
    ) -> Fetched:
        """A partition's read as the client may take it: its leader epoch checked, its
        divergence or lost position told, an offset out of range refused."""
        end, start, epoch = result.log_end, result.log_start, result.leader_epoch
        lso = result.last_stable
        try:
            check_leader_epoch(r.current_leader_epoch, epoch)
            if r.last_fetched_epoch >= 0:
                diverging = await self._diverging_epoch(r, epoch, end)
                if diverging is not None:
                    return Fetched(None, end, start, [], epoch, diverging, lso)
            if r.current_leader_epoch < 0 and await self._lost_position(r, epoch, seen_epochs):
                # Out of range makes the client reset by its auto.offset.reset (or raise)
                # instead of going on silently over offsets that now hold other records.
                raise OffsetOutOfRange(f"{r.topic}[{r.partition}] was truncated")
            if result.below_start or result.past_end:
                raise OffsetOutOfRange(
                    f"offset {r.offset} is out of range for {r.topic}[{r.partition}] "
                    f"(offsets {start}..{end})"
                )
        except KafkaesqueError as exc:
            return Fetched(exc, end, start, leader_epoch=epoch, last_stable=lso)
        if result.batches and self.traffic is not None:
            self.traffic.fetched(r.topic, result.batches)
        return Fetched(
            None, end, start, result.batches, epoch, last_stable=lso, aborted=result.aborted
        )

    async def _diverging_epoch(
        self, r: FetchRequest, current: int, log_end: int
    ) -> tuple[int, int] | None:
        """As Kafka's leader: the client's last fetched epoch ends here before its fetch
        offset, or this partition never had that epoch (a restore truncated it and began
        a new one): then (the largest epoch <= it, where that ended), else None. The
        current epoch (``current``) ends at the log end (``log_end``): no round trip."""
        if r.last_fetched_epoch == current:
            epoch, end = current, log_end
        else:
            epoch, end = await self.log.epoch_end_offset(r.topic, r.partition, r.last_fetched_epoch)
        if epoch < 0:
            raise OffsetOutOfRange(
                f"leader epoch {r.last_fetched_epoch} of {r.topic}[{r.partition}] is unknown"
            )
        if epoch < r.last_fetched_epoch or end < r.offset:
            return epoch, end
        return None

    async def _lost_position(
        self, r: FetchRequest, epoch: int, seen_epochs: dict[TopicPartition, int] | None
    ) -> bool:
        """For a client that sends no leader epoch (aiokafka, older versions): True when it
        last read the partition at an older epoch and now reads past where that epoch's
        records survive, i.e. its position was taken from records Redis lost and new ones
        may have reused those offsets (KIP-320 cannot tell it: it does not check)."""
        if seen_epochs is None:
            return False
        key = r.topic, r.partition
        seen = seen_epochs.get(key)
        seen_epochs[key] = epoch
        if seen is None or seen >= epoch:
            return False
        _, end = await self.log.epoch_end_offset(r.topic, r.partition, seen)
        return r.offset > end


def keys_of(requests: Sequence[FetchRequest]) -> list[TopicPartition]:
    return [(r.topic, r.partition) for r in requests]


def topics_of(requests: Sequence[FetchRequest]) -> set[str]:
    return {r.topic for r in requests}


def fetched_size(fetched: Fetched) -> int:
    return sum(map(len, fetched.batches))


def enough(results: Iterable[Fetched], min_bytes: int) -> bool:
    """A fetch answers now: ``min_bytes`` were read, or a partition has an error."""
    total = 0
    for fetched in results:
        if fetched.error is not None:
            return True
        total += fetched_size(fetched)
    return total >= min_bytes
