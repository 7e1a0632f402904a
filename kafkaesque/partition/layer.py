"""The partition layer between front ends and the log (the role of Kafka's ReplicaManager).

Front ends (the wire handlers, the CLI) ask it to append validated batches to partitions,
to read many partitions within a byte budget and wait for records (long-poll), and to
look offsets up. Refusals are core exceptions (kafkaesque.errors); the multi-partition
calls return one per partition instead of raising, so one bad partition does not fail
the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kafkaesque.errors import (
    CorruptBatch,
    HotTierUnavailable,
    InvalidRecord,
    KafkaesqueError,
    LookupTimedOut,
    NeedsRecovery,
    StorageUnavailable,
    UnknownTopic,
    UnsupportedLookup,
)
from kafkaesque.hot.durability import DEFAULT_TIMEOUT_MS, Durability
from kafkaesque.hot.log import Log
from kafkaesque.hot.log_types import LogAppended
from kafkaesque.hot.memory import MemoryGuard
from kafkaesque.hot.notify import Notifier
from kafkaesque.log_throttle import LogThrottle, clip
from kafkaesque.partition.append_policy import PolicyCache
from kafkaesque.partition.leadership import Leadership
from kafkaesque.partition.markers import TransactionMarkers
from kafkaesque.partition.read_types import NO_EPOCH
from kafkaesque.partition.reads import ReadingPartitions, check_leader_epoch
from kafkaesque.records.batch import offset_count, record_count, split_batches
from kafkaesque.types import TopicPartition

log = logging.getLogger(__name__)
REFUSALS = LogThrottle(log)  # the batches clients send that are refused

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


class TopicTraffic:
    """Records and bytes appended to (written) and fetched from (read) each topic, as
    Kafka's BrokerTopicStats: counted here on the produce and fetch paths into plain lists
    (a lookup and two additions per partition with records), read by the broker's
    metrics when they are scraped (wire/topic_metrics.py)."""

    def __init__(self) -> None:
        self.written: dict[str, list[int]] = {}  # topic -> [records, bytes]
        self.read: dict[str, list[int]] = {}

    def wrote(self, topic: str, batches: Sequence[bytes]) -> None:
        self._count(self.written, topic, batches)

    def fetched(self, topic: str, batches: Sequence[bytes]) -> None:
        self._count(self.read, topic, batches)

    @staticmethod
    def _count(table: dict[str, list[int]], topic: str, batches: Sequence[bytes]) -> None:
        counts = table.get(topic)
        if counts is None:
            counts = table[topic] = [0, 0]
        for batch in batches:
            counts[0] += record_count(batch)
            counts[1] += len(batch)


class Partitions(ReadingPartitions, TransactionMarkers):
    """Validated appends, budgeted reads with a long-poll wait, and offset lookups.

    ``notifier`` wakes waiting reads when records are appended, by this process or any
    other; without one, a read waits its whole ``max_wait``."""

    def __init__(
        self, log: Log, notifier: Notifier | None = None, max_message_bytes: int = MAX_MESSAGE_BYTES
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
        # Set by a broker that counts records and bytes per topic (its metrics).
        self.traffic: TopicTraffic | None = None
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
        transaction: int | None = None,
    ) -> Appended:
        """Append whole, checked batches atomically, as the topic's configs ask (see
        kafkaesque.partition.append_policy); raises a KafkaesqueError, and then appends none. With
        ``acks_all``, return once the append is as durable as ``durability`` asks;
        ``transaction``: see Log.append."""
        batches, append_time = await self._as_configured(topic, batches)
        durability = self.durability if acks_all else None
        appended = await self.log.append(
            topic, partition, batches, durability, timeout_ms, transaction
        )
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
        if self.traffic is not None:
            self.traffic.wrote(topic, batches)
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
        records: bytes | memoryview | None,
        acks_all: bool = False,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        transaction: int | None = None,
    ) -> Appended:
        """Check a client's records (one or more batches as sent) and append them; the
        refusal, if any, is in the result."""
        try:
            batches = _split(records)
            return await self.append(topic, partition, batches, acks_all, timeout_ms, transaction)
        except KafkaesqueError as exc:
            return _refused(topic, partition, exc)

    async def append_many(
        self,
        records: Mapping[TopicPartition, bytes | memoryview | None],
        acks_all: bool = False,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        transaction: int | None = None,
    ) -> dict[TopicPartition, Appended]:
        """Append a client's records to many partitions; one outcome per partition. The
        appends go to Redis in one round trip, unless acks=all waits for durability
        (the waits cover one connection's writes: then each partition is one call)."""
        if len(records) == 1:  # no task to gather: a task costs a fifth of an append
            (((topic, partition), data),) = records.items()
            return {
                (topic, partition): await self.append_records(
                    topic, partition, data, acks_all, timeout_ms, transaction
                )
            }
        if acks_all and self.durability.waits:
            outcomes = await asyncio.gather(
                *(
                    self.append_records(t, p, data, acks_all, timeout_ms, transaction)
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
                [(topic, partition, batches) for topic, partition, batches, _ in ready],
                transaction,
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
        offsets: Sequence[tuple[int, int, int, int] | KafkaesqueError | None]
        try:
            offsets = await self.log.partition_offsets(
                [(lookups[i].topic, lookups[i].partition) for i in ends]
            )
        except StorageUnavailable as exc:  # Redis is away: each partition says so
            offsets = [exc] * len(ends)
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
        stable offset, and a search by time finds nothing at or past it."""
        # The epoch is read before the lookup: an offset found after a restore raised it
        # is then labelled with the older epoch, which makes a client validate it (a
        # re-read at worst), never with a newer one that would hide a truncation.
        epoch = await self._led_epoch(topic, partition, current_leader_epoch)
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
        if found is None:
            return None
        # READ_COMMITTED finds nothing at or past the last stable offset, as in Kafka: a
        # reader placed there would stand in a transaction that may yet abort.
        if committed and found[0] >= await self.log.last_stable_offset(topic, partition):
            return None
        return FoundOffset(found[0], found[1], epoch)

    async def epoch_end_offset(
        self, topic: str, partition: int, epoch: int, current_leader_epoch: int = NO_EPOCH
    ) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset), see Log.epoch_end_offset."""
        await self._led_epoch(topic, partition, current_leader_epoch)
        return await self.log.epoch_end_offset(topic, partition, epoch)

    async def _led_epoch(self, topic: str, partition: int, current_leader_epoch: int) -> int:
        """The partition's leader epoch, once it is known to exist, to be led here, and at
        the client's ``current_leader_epoch`` (else UnknownTopic, NotLeader, or the epoch's
        error)."""
        config = await self.log.topic(topic)
        if not 0 <= partition < config.partitions:
            raise UnknownTopic(f"unknown topic or partition: {topic}[{partition}]")
        self.check_leader(topic, partition)
        [epoch] = await self.log.leader_epochs(topic, [partition])
        check_leader_epoch(current_leader_epoch, epoch)
        return epoch


def _split(records: bytes | memoryview | None) -> list[bytes]:
    """A client's records as batches; raises InvalidRecord for what is not."""
    if not records:
        raise CorruptBatch("no record batch")
    return split_batches(records)


def _refused(topic: str, partition: int, exc: KafkaesqueError) -> Appended:
    """A refused append as its outcome, logged as its kind deserves."""
    if isinstance(exc, InvalidRecord):  # a client's doing: it must not flood the log
        REFUSALS.client(
            "rejected batch",
            logging.INFO,
            "rejected batches",
            "rejected batch for %s[%d]: %s",
            clip(topic),
            partition,
            clip(exc),
            logger=log,
        )
    elif isinstance(exc, HotTierUnavailable):
        pass  # logged once per outage by the client
    elif isinstance(exc, StorageUnavailable | NeedsRecovery):
        # Redis lost its data and the archive cannot restore the offsets yet: retriable.
        log.warning("cannot append to %s[%d]: %s", topic, partition, exc)
    return Appended(exc)
