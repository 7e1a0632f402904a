"""The partition layer between front ends and the log (the role of Kafka's ReplicaManager).

Front ends (the wire handlers, the CLI) ask it to append validated batches to partitions,
to read many partitions within a byte budget and wait for records (long-poll), and to
look offsets up. Refusals are core exceptions (kafkaesque.errors); the multi-partition
calls return one per partition instead of raising, so one bad partition does not fail
the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass

from kafkaesque.append_policy import PolicyCache
from kafkaesque.durability import DEFAULT_TIMEOUT_MS, Durability
from kafkaesque.errors import (
    CorruptBatch,
    FencedLeaderEpoch,
    HotTierUnavailable,
    InvalidRecord,
    KafkaesqueError,
    LookupTimedOut,
    NeedsRecovery,
    OffsetOutOfRange,
    StorageUnavailable,
    UnknownLeaderEpoch,
    UnknownTopic,
    UnsupportedLookup,
)
from kafkaesque.leadership import Leadership
from kafkaesque.log import Log
from kafkaesque.log_types import Appended as LogAppended
from kafkaesque.log_types import ReadResult
from kafkaesque.memory import MemoryGuard
from kafkaesque.notify import Notifier
from kafkaesque.reads import (
    NO_EPOCH,
    AppendWait,
    Fetched,
    FetchRequest,
    ReadCache,
    TopicPartition,
    grown_requests,
)
from kafkaesque.records import offset_count, split_batches

log = logging.getLogger(__name__)

# ListOffsets' special timestamps (KIP-734: MAX_TIMESTAMP, KIP-1005: the local and tiered
# ends of the log; here Redis is local, the archive tiered).
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
MAX_MESSAGE_BYTES = 1024 * 1024 + 12  # Kafka's message.max.bytes default


@dataclass(frozen=True, slots=True)
class Appended:
    """One partition's outcome of a multi-partition append."""

    error: KafkaesqueError | None = None
    base_offset: int = -1
    log_start: int = -1
    # The time (ms) the broker stamped the batches with, for a LogAppendTime topic; -1
    # for CreateTime. (A retry deduplicated by its sequence numbers keeps the time its
    # first append stored, which this does not tell.)
    log_append_time: int = -1


@dataclass(frozen=True, slots=True)
class OffsetLookup:
    """One partition of a ListOffsets: ``timestamp`` as ``Partitions.list_offset`` takes
    it."""

    topic: str
    partition: int
    timestamp: int
    current_leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class FoundOffset:
    offset: int
    timestamp: int  # -1 unless looked up by time
    leader_epoch: int


def check_leader_epoch(requested: int, current: int) -> None:
    """A client's current leader epoch against the partition's (KIP-320): older is fenced,
    newer is one this broker does not know yet; -1 (not sent) is never checked."""
    if requested < 0 or requested == current:
        return
    if requested < current:
        raise FencedLeaderEpoch(f"leader epoch {requested} is older than {current}")
    raise UnknownLeaderEpoch(f"leader epoch {requested} is newer than {current}")


class Partitions:
    """Validated appends, budgeted reads with a long-poll wait, and offset lookups.

    ``notifier`` wakes waiting reads when records are appended, by this process or any
    other; without one, a read waits its whole ``max_wait``."""

    def __init__(
        self,
        log: Log,
        notifier: Notifier | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.log = log
        self.notifier = notifier
        self.max_message_bytes = max_message_bytes
        # The topic configs appends obey, read at most once a second per topic.
        self.policies = PolicyCache(log, max_message_bytes)
        # What acks=all waits for: none until the broker probed its Redis (durability.probe).
        self.durability = Durability()
        # Set by a broker that watches Redis memory: appends are refused when it is full.
        self.memory: MemoryGuard | None = None
        # Set by a broker among several: reads of partitions another one leads are
        # refused (NotLeader); its appends are refused in Redis (Log.node).
        self.leadership: Leadership | None = None

    # -- appends ----------------------------------------------------------------------
    async def append(
        self,
        topic: str,
        partition: int,
        batches: Sequence[bytes],
        acks_all: bool = False,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> Appended:
        """Append whole, checked batches atomically, as the topic's configs ask (see
        kafkaesque.append_policy); raises a KafkaesqueError, and then appends none. With
        ``acks_all``, return once the append is as durable as ``durability`` asks."""
        batches, append_time = await self._as_configured(topic, batches)
        durability = self.durability if acks_all else None
        appended = await self.log.append(topic, partition, batches, durability, timeout_ms)
        return self._appended(topic, partition, batches, appended, append_time)

    async def _as_configured(
        self, topic: str, batches: Sequence[bytes]
    ) -> tuple[Sequence[bytes], int]:
        """The batches as the topic's configs want them stored, and the log append time
        they were stamped with (-1: CreateTime); raises what refuses them."""
        policy = self.policies.cached(topic) or await self.policies.get(topic)
        policy.check_size(batches)
        append_time = -1
        if not policy.keeps_batches:
            now = int(time.time() * 1000)
            batches = policy.apply(batches, now)
            append_time = now if policy.log_append_time else -1
        if self.memory is not None:
            self.memory.check_append(sum(map(len, batches)))
        return batches, append_time

    def _appended(
        self,
        topic: str,
        partition: int,
        batches: Sequence[bytes],
        appended: LogAppended,
        append_time: int,
    ) -> Appended:
        """Wake this process' readers at once (others hear it through Redis)."""
        if self.notifier is not None:
            end = appended.base_offsets[-1] + offset_count(batches[-1])
            self.notifier.notify(topic, f"{partition}:{end}")  # as append.lua publishes
        return Appended(None, appended.base_offsets[0], appended.log_start, append_time)

    def forget_config(self, topic: str) -> None:
        """The topic's configs changed (AlterConfigs, deleted or created again): the next
        append reads them again instead of using the cached ones for up to a second."""
        self.policies.forget(topic)

    async def append_records(
        self,
        topic: str,
        partition: int,
        records: bytes | None,
        acks_all: bool = False,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> Appended:
        """Check a client's records (one or more batches as sent) and append them; the
        refusal, if any, is in the result."""
        try:
            return await self.append(topic, partition, _split(records), acks_all, timeout_ms)
        except KafkaesqueError as exc:
            return _refused(topic, partition, exc)

    async def append_many(
        self,
        records: dict[TopicPartition, bytes | None],
        acks_all: bool = False,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> dict[TopicPartition, Appended]:
        """Append a client's records to many partitions; one outcome per partition. The
        appends go to Redis in one round trip, unless acks=all waits for durability
        (the waits cover one connection's writes: then each partition is one call)."""
        if len(records) == 1:  # no task to gather: a task costs a fifth of an append
            (((topic, partition), data),) = records.items()
            return {
                (topic, partition): await self.append_records(
                    topic, partition, data, acks_all, timeout_ms
                )
            }
        if acks_all and self.durability.waits:
            outcomes = await asyncio.gather(
                *(
                    self.append_records(t, p, data, acks_all, timeout_ms)
                    for (t, p), data in records.items()
                )
            )
            return dict(zip(records, outcomes, strict=True))
        results: dict[TopicPartition, Appended] = {}
        ready: list[tuple[str, int, Sequence[bytes], int]] = []
        for (topic, partition), data in records.items():
            try:
                batches, append_time = await self._as_configured(topic, _split(data))
            except KafkaesqueError as exc:
                results[topic, partition] = _refused(topic, partition, exc)
            else:
                ready.append((topic, partition, batches, append_time))
        try:
            replies: list[LogAppended | KafkaesqueError] = await self.log.append_many(
                [(topic, partition, batches) for topic, partition, batches, _ in ready]
            )
        except KafkaesqueError as exc:  # Redis is away: every partition says so
            replies = [exc] * len(ready)
        for (topic, partition, batches, append_time), reply in zip(ready, replies, strict=True):
            results[topic, partition] = (
                _refused(topic, partition, reply)
                if isinstance(reply, KafkaesqueError)
                else self._appended(topic, partition, batches, reply, append_time)
            )
        return {tp: results[tp] for tp in records}

    # -- transactions -----------------------------------------------------------------
    async def write_markers(
        self,
        partitions: Iterable[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int = 0,
    ) -> dict[TopicPartition, KafkaesqueError | None]:
        """Append a COMMIT or ABORT control batch for the producer's transaction to each
        partition (atomic per partition), ending it there: the partition's last stable
        offset moves past it, an abort is recorded in the partition's aborted-transaction
        index. A partition where the producer has no open transaction still gets the
        marker (Kafka writes it; harmless). Per partition: None, or the error
        (UnknownTopic, InvalidProducerEpoch for a marker epoch older than the producer's
        on that partition, StorageUnavailable...)."""
        targets = list(dict.fromkeys(partitions))

        async def one(topic: str, partition: int) -> KafkaesqueError | None:
            try:
                await self.log.end_transaction(
                    topic, partition, producer_id, producer_epoch, commit, coordinator_epoch
                )
            except KafkaesqueError as exc:
                return exc
            if self.notifier is not None:
                self.notifier.notify(topic, f"{partition}:")  # read_committed waits for the LSO
            return None

        outcomes = await asyncio.gather(*(one(t, p) for t, p in targets))
        return dict(zip(targets, outcomes, strict=True))

    async def open_transactions(self, topic: str, partition: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of every transaction open on the partition, oldest
        first (DescribeProducers' current_txn_start_offset); raises UnknownTopic."""
        return await self.log.open_transactions(topic, partition)

    # -- reads ------------------------------------------------------------------------
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
        read: list[FetchRequest] = []
        async with contextlib.AsyncExitStack() as stack:
            if cache is None:
                appended = await stack.enter_async_context(self.appends(_topics(requests)))
                results = await self._read_all(requests, max_bytes, seen_epochs, committed)
                fresh = dict(results)
            else:
                appended = cache.watching(_topics(requests))
                grown = appended.take()
                cache.lapsed(self.leadership)  # those are read again: NOT_LEADER
                if max_wait > 0 and min_bytes > 0:
                    results, missing = cache.known(requests, grown, committed)
                else:
                    # Answered at once: an append in another process whose message has
                    # not arrived yet would wake nothing, so everything is read. (A long
                    # poll's wait is woken by that message.)
                    cache.known((), grown, committed)
                    results, missing = dict.fromkeys(_keys(requests)), list(requests)
                if missing:
                    fresh = await self._read_all(missing, max_bytes, seen_epochs, committed)
                    results.update(fresh)
                    read = list(missing)
            # As Kafka, a fetch of no partitions is answered at once: no append could
            # wake it (nor, at shutdown, the notifier).
            while requests and not self.closed and not _enough(fresh.values(), min_bytes):
                timeout = deadline - loop.time()
                if timeout <= 0 or not await appended.wait(timeout):
                    break  # nothing was appended: what we read is still current
                # Read again only the partitions that grew (one round trip), within the
                # budget the others left.
                again = grown_requests(requests, appended.take(), results)
                if not again:
                    continue  # heard of appends this read saw already
                regrown = {(r.topic, r.partition) for r in again}
                used = sum(_size(f) for tp, f in fresh.items() if tp not in regrown)
                reread = await self._read_all(
                    again, max_bytes - used, seen_epochs, committed, min_one=used == 0
                )
                results.update(reread)
                fresh.update(reread)
                read += again
        if cache is not None and read:
            cache.remember(read, fresh, committed)
        return results  # type: ignore[return-value]  # every partition has its answer

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

    async def _read_all(
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

    # -- offsets ----------------------------------------------------------------------
    async def list_offsets(
        self,
        lookups: Sequence[OffsetLookup],
        committed: bool = False,
        deadline: float | None = None,
    ) -> list[FoundOffset | KafkaesqueError | None]:
        """``list_offset`` for many partitions, one result (or error) each; the lookups of
        the log's ends (LATEST, and EARLIEST without an archive), the ones a consumer
        starting on many partitions sends, take one round trip for all. A lookup still
        running at ``deadline`` (the event loop's time) is LookupTimedOut (ListOffsets
        v10: a search by time, or in the archive, may be slow)."""
        results: list[FoundOffset | KafkaesqueError | None] = [None] * len(lookups)
        ends = [
            i
            for i, lookup in enumerate(lookups)
            if lookup.timestamp == LATEST
            or (lookup.timestamp == EARLIEST and self.log.cold is None)
        ]
        try:
            offsets = await self.log.partition_offsets(
                [(lookups[i].topic, lookups[i].partition) for i in ends]
            )
        except StorageUnavailable as exc:  # Redis is away: each partition says so
            offsets = [exc] * len(ends)  # type: ignore[list-item]
        for i, found in zip(ends, offsets, strict=True):
            lookup = lookups[i]
            if self.leadership is not None:
                found = self.leadership.check(lookup.topic, lookup.partition) or found
            if isinstance(found, KafkaesqueError):
                results[i] = found
                continue
            if found is None:
                results[i] = UnknownTopic(
                    f"unknown topic or partition: {lookup.topic}[{lookup.partition}]"
                )
                continue
            start, end, epoch, lso = found
            try:
                check_leader_epoch(lookup.current_leader_epoch, epoch)
            except KafkaesqueError as exc:
                results[i] = exc
                continue
            if lookup.timestamp == EARLIEST:
                offset = start
            else:
                offset = lso if committed else end
            results[i] = FoundOffset(offset, -1, epoch)
        done = set(ends)
        for i, lookup in enumerate(lookups):
            if i not in done:
                try:
                    async with asyncio.timeout_at(deadline):
                        results[i] = await self.list_offset(
                            lookup.topic,
                            lookup.partition,
                            lookup.timestamp,
                            lookup.current_leader_epoch,
                            committed,
                        )
                except TimeoutError:
                    results[i] = LookupTimedOut(f"offset lookup {lookup.timestamp} timed out")
                except KafkaesqueError as exc:
                    results[i] = exc
        return results

    async def list_offset(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        current_leader_epoch: int = NO_EPOCH,
        committed: bool = False,
    ) -> FoundOffset | None:
        """The offset for ``timestamp``: LATEST, EARLIEST, MAX_TIMESTAMP (the record with
        the largest timestamp), EARLIEST_LOCAL (the first offset in Redis), LATEST_TIERED
        (the last archived), or ms: the first record at or after it. None when there is
        none, as Kafka answers -1. With ``committed`` (READ_COMMITTED) LATEST is the last
        stable offset."""
        config = await self.log.topic(topic)
        if not 0 <= partition < config.partitions:
            raise UnknownTopic(f"unknown topic or partition: {topic}[{partition}]")
        self.check_leader(topic, partition)
        # The epoch is read before the lookup: an offset found after a restore raised it
        # is then labelled with the older epoch, which makes a client validate it (a
        # re-read at worst), never with a newer one that would hide a truncation.
        [epoch] = await self.log.leader_epochs(topic, [partition])
        check_leader_epoch(current_leader_epoch, epoch)
        if timestamp == LATEST and committed:
            return FoundOffset(await self.log.last_stable_offset(topic, partition), -1, epoch)
        if timestamp == LATEST:
            return FoundOffset((await self.log.state(topic, partition)).log_end, -1, epoch)
        if timestamp == EARLIEST:
            return FoundOffset(await self.log.earliest_offset(topic, partition), -1, epoch)
        if timestamp == EARLIEST_LOCAL:
            return FoundOffset((await self.log.state(topic, partition)).log_start, -1, epoch)
        if timestamp == LATEST_TIERED:
            last = await self.log.last_archived_offset(topic, partition)
            return None if last is None else FoundOffset(last, -1, epoch)
        if timestamp == MAX_TIMESTAMP:
            found = await self.log.max_timestamp_offset(topic, partition)
        elif timestamp < 0:
            raise UnsupportedLookup(f"offset lookup {timestamp} is not supported")
        else:
            found = await self.log.offset_for_timestamp(topic, partition, timestamp)
        return None if found is None else FoundOffset(found[0], found[1], epoch)

    async def epoch_end_offset(
        self, topic: str, partition: int, epoch: int, current_leader_epoch: int = NO_EPOCH
    ) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset), see Log.epoch_end_offset."""
        config = await self.log.topic(topic)
        if not 0 <= partition < config.partitions:
            raise UnknownTopic(f"no partition {partition} in {topic}")
        self.check_leader(topic, partition)
        [current] = await self.log.leader_epochs(topic, [partition])
        check_leader_epoch(current_leader_epoch, current)
        return await self.log.epoch_end_offset(topic, partition, epoch)


def _split(records: bytes | None) -> list[bytes]:
    """A client's records as batches; raises InvalidRecord for what is not."""
    if not records:
        raise CorruptBatch("no record batch")
    return split_batches(records)


def _refused(topic: str, partition: int, exc: KafkaesqueError) -> Appended:
    """A refused append as its outcome, logged as its kind deserves."""
    if isinstance(exc, InvalidRecord):
        log.info("rejected batch for %s[%d]: %s", topic, partition, exc)
    elif isinstance(exc, HotTierUnavailable):
        pass  # logged once per outage by the client
    elif isinstance(exc, StorageUnavailable | NeedsRecovery):
        # Redis lost its data and the archive cannot restore the offsets yet: retriable.
        log.warning("cannot append to %s[%d]: %s", topic, partition, exc)
    return Appended(exc)


def _keys(requests: Sequence[FetchRequest]) -> list[TopicPartition]:
    return [(r.topic, r.partition) for r in requests]


def _topics(requests: Sequence[FetchRequest]) -> set[str]:
    return {r.topic for r in requests}


def _size(fetched: Fetched) -> int:
    return sum(map(len, fetched.batches))


def _enough(results: Iterable[Fetched], min_bytes: int) -> bool:
    """A fetch answers now: ``min_bytes`` were read, or a partition has an error."""
    total = 0
    for fetched in results:
        if fetched.error is not None:
            return True
        total += _size(fetched)
    return total >= min_bytes
