"""The partition layer between front ends and the log (the role of Kafka's ReplicaManager).

Front ends (the wire handlers, the CLI) ask it to append validated batches to partitions,
to read many partitions within a byte budget and wait for records (long-poll), and to
look offsets up. Refusals are core exceptions (kafkaesque.errors); the multi-partition
calls return one per partition instead of raising, so one bad partition does not fail
the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from kafkaesque.errors import (
    KafkaesqueError,
    LookupTimedOut,
    StorageUnavailable,
    UnknownTopic,
    UnsupportedLookup,
)
from kafkaesque.hot.durability import Durability
from kafkaesque.hot.log import Log
from kafkaesque.hot.memory import MemoryGuard
from kafkaesque.hot.notify import Notifier
from kafkaesque.partition.appends import (
    MAX_MESSAGE_BYTES,
    AppendingPartitions,
    PolicyCache,
    TopicTraffic,
)
from kafkaesque.partition.leadership import Leadership
from kafkaesque.partition.markers import TransactionMarkers
from kafkaesque.partition.read_types import NO_EPOCH
from kafkaesque.partition.reads import ReadingPartitions, check_leader_epoch

# ListOffsets' special timestamps (KIP-734: MAX_TIMESTAMP, KIP-1005: the local and tiered
# ends of the log; here Redis is local, the archive tiered).
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


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


class Partitions(AppendingPartitions, ReadingPartitions, TransactionMarkers):
    """Validated appends (kafkaesque.partition.appends), budgeted reads with a long-poll
    wait (kafkaesque.partition.reads), transactions' markers and offset lookups.

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
