"""Topics, partitions and pages: the Python face of the Lua scripts.

The keys are named in kafkaesque/keys.py and described in docs/redis-layout.md.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import AskError

from kafkaesque.archiving import ArchivingLog
from kafkaesque.clock import now_ms as _now_ms
from kafkaesque.durability import DEFAULT_TIMEOUT_MS, Durability
from kafkaesque.errors import (
    KafkaesqueError,
    NeedsRecovery,
    OffsetOutOfRange,
    PolicyViolation,
    SequenceAhead,
    UnknownProducerId,
    UnknownTopic,
)
from kafkaesque.keys import Keys, is_cluster
from kafkaesque.log_leaders import LeadersLog
from kafkaesque.log_reads import ReadsLog
from kafkaesque.log_steps import StepsLog
from kafkaesque.log_topics import TopicsLog
from kafkaesque.log_transactions import TransactionsLog
from kafkaesque.log_types import (
    Appended,
    ColdStore,
    PartitionState,
    RestoredTopic,
)
from kafkaesque.offset_guess import OffsetGuesses
from kafkaesque.records import decode_batch, next_offset, offset_count, producer_fields
from kafkaesque.scripts import Scripts
from kafkaesque.sequence import EPOCH_MS, STEPS_PER_MS, clock, record_id
from kafkaesque.slots import slot_of

# DeleteRecords' offset that stands for the high watermark (Kafka's tool: -1).
HIGH_WATERMARK = -1


class Log(ReadsLog, TopicsLog, ArchivingLog, StepsLog, LeadersLog, TransactionsLog):
    """Topics and partitions kept in one Redis database (the topic operations, in
    kafkaesque.log_topics, and the archiver's side of it, in kafkaesque.archiving, are
    inherited).

    ``cold`` serves offsets Redis no longer holds (the archive). ``recover`` is called when
    Redis turns out to have lost its data, before any append; it must restore the offsets
    from the archive (``restore``). Without one, the log starts afresh.

    On a Redis Cluster (``cluster``; by default: whether ``redis`` is a cluster client) the
    keys take the cluster layout (kafkaesque.keys) and record ids the per-slot clock
    (kafkaesque.sequence).
    """

    def __init__(
        self,
        redis: Redis,
        namespace: str = "ks",
        cold: ColdStore | None = None,
        recover: Callable[[Log], Awaitable[None]] | None = None,
        cluster: bool | None = None,
    ) -> None:
        self.redis = redis
        self.ns = namespace
        self.cluster = is_cluster(redis) if cluster is None else cluster
        self.keys = Keys(namespace, self.cluster)
        # The highest sequence number appends through this Log were given (on a cluster,
        # the floor of the next: one broker's successive appends get growing ids).
        self.highest_sequence = 0
        self.cold = cold
        self.recover = recover
        self.scripts = Scripts(redis)
        # The offsets the next appends should get, written into their batches so that
        # Redis need not rewrite them (kafkaesque.offset_guess).
        self.guesses = OffsetGuesses()
        # The broker appending through this log (kafkaesque.leadership): its appends to a
        # partition another broker leads are refused. "" (the CLI, tools): never refused.
        self.node = ""
        if hasattr(redis, "on_switch"):  # through Sentinel: new epochs after a failover
            from kafkaesque.failover import EpochBump

            redis.on_switch(EpochBump(namespace))

    def channel(self, topic: str) -> str:
        """Pub/sub channel that carries the new log end after every append."""
        return self.keys.appended(topic)

    # -- partitions ---------------------------------------------------------------
    async def append(
        self,
        topic: str,
        partition: int,
        batches: Sequence[bytes],
        durability: Durability | None = None,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> Appended:
        """Append checked RecordBatch v2 batches atomically; returns their base offsets.
        With ``durability`` it returns only once the append is on disk / at the replicas
        as that asks (raising NotDurable after ``timeout_ms``; the append stays).

        Batches of idempotent producers (producer id >= 0) are sequence-checked: a retry of
        one of a producer's last five batches returns its original offset and is not written
        again; a gap, an old epoch or an unknown producer in mid-sequence (its state was
        lost) raises a ProducerFenced subclass and writes nothing."""
        placed, guess = self.guesses.place(topic, partition, batches)
        keys, args = self._append_call(topic, partition, placed)
        try:
            if durability is None or not durability.waits:
                start, last, epoch, *bases = await self._call(self.scripts.append, keys, args)
            else:
                start, last, epoch, *bases = await self._call(
                    functools.partial(self._append_durably, durability, timeout_ms), keys, args
                )
        except SequenceAhead as exc:
            raise await self._sequence_ahead(topic, partition, batches, exc) from None
        self._given(last)
        self.guesses.learn(topic, partition, guess, bases, batches, epoch)
        return Appended(bases, start)

    async def _sequence_ahead(
        self, topic: str, partition: int, batches: Sequence[bytes], exc: SequenceAhead
    ) -> KafkaesqueError:
        """What to answer a batch ahead of its producer's sequence: "not yet" (the missing
        batch was refused and will be retried), unless the producer's newest batch here is
        older than the partition's epoch and a failover began that epoch
        (kafkaesque.failover): then the missing batches were acknowledged and lost with
        the old primary, and will never come. UNKNOWN_PRODUCER_ID lets the client bump
        its epoch and go on (KIP-360) instead of retrying for ever."""
        producer_id = producer_fields(batches[0])[0]
        p = self.keys.partition(topic, partition)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(p.meta, "epoch", "replid")
        pipe.hget(p.producers, producer_id)
        (epoch, replid), state = await pipe.execute()
        if replid is None or state is None or epoch is None:
            return exc
        started = await self.redis.hget(p.epochs, int(epoch))
        newest = int(state.split()[-1].split(b":")[-1]) if b":" in state else -1
        if started is None or newest >= int(started):
            return exc
        return UnknownProducerId(
            f"producer {producer_id}'s last batches on {topic}[{partition}] were lost in a "
            "failover of the Redis primary"
        )

    async def append_many(
        self, appends: Sequence[tuple[str, int, Sequence[bytes]]]
    ) -> list[Appended | KafkaesqueError]:
        """Append to many partitions in one pipelined round trip, each atomically as
        ``append`` (without durability waits: they cover one connection's writes, and
        a pipeline may not run on the one the waits would be sent on). One result per
        (topic, partition, batches): its Appended, or the core error that refused it."""
        placed = [
            self.guesses.place(topic, partition, batches) for topic, partition, batches in appends
        ]
        calls = [
            self._append_call(topic, partition, batches)
            for (topic, partition, _), (batches, _) in zip(appends, placed, strict=True)
        ]
        replies = await self.scripts.append.many(self.redis, calls)
        lost = [i for i, reply in enumerate(replies) if isinstance(reply, NeedsRecovery)]
        if lost:  # Redis lost its data: none of those ran; recover, then append them
            await self.ensure_recovered()
            again = await self.scripts.append.many(self.redis, [calls[i] for i in lost])
            for i, reply in zip(lost, again, strict=True):
                if self.cluster and isinstance(reply, NeedsRecovery):  # see _call
                    reply = UnknownTopic(f"unknown topic or partition: {appends[i][0]}")
                replies[i] = reply
        results: list[Appended | KafkaesqueError] = []
        for (topic, partition, batches), (_, guess), reply in zip(
            appends, placed, replies, strict=True
        ):
            if isinstance(reply, SequenceAhead):
                results.append(await self._sequence_ahead(topic, partition, batches, reply))
            elif isinstance(reply, KafkaesqueError):
                results.append(reply)
            elif isinstance(reply, Exception):
                raise reply
            else:
                start, last, epoch, *bases = reply
                self._given(last)
                self.guesses.learn(topic, partition, guess, bases, batches, epoch)
                results.append(Appended(bases, start))
        return results

    def _given(self, sequence: int) -> None:
        if sequence > self.highest_sequence:
            self.highest_sequence = sequence

    def _sequencing(self, topic: str, partition: int, now: int) -> tuple[str, str, int]:
        """The sequence key, recovery marker and sequence floor of an append (append.lua):
        on one Redis the counter, the incarnation and 0; on a cluster the slot's hash, the
        partition's meta (the catalog's incarnation is checked before, in Python: a shard
        that lost the partition answers it unknown) and the clock, never below what this
        Log was given."""
        k = self.keys
        if not self.cluster:
            return k.gseq, k.incarnation, 0
        floor = max(clock(now), self.highest_sequence + 1)
        return k.slot_hash(slot_of(topic, partition)), k.partition(topic, partition).meta, floor

    def _append_call(
        self, topic: str, partition: int, batches: Sequence[bytes]
    ) -> tuple[list[str], list[object]]:
        """append.lua's keys and arguments."""
        k = self.keys
        p = k.partition(topic, partition)
        now = _now_ms()
        sequence, marker, floor = self._sequencing(topic, partition, now)
        args: list[object] = [p.prefix, k.appended(topic), now, floor, self.node]
        for batch in batches:
            args += (offset_count(batch), *producer_fields(batch), batch)
        keys = [p.meta, p.index, p.stats, sequence, p.producers, marker, p.txn_open]
        return keys, args

    async def _append_durably(
        self, durability: Durability, timeout_ms: int, keys: list[str], args: list[Any]
    ) -> Any:
        """The append script, then the waits on the same connection: WAITAOF and WAIT
        only cover the writes of their own connection. On a cluster, a connection to the
        node serving the partition (its slot map read again once if the slot moved)."""
        if is_cluster(self.redis):
            for attempt in range(2):
                node = await self.redis.for_key(keys[0])  # type: ignore[attr-defined]
                try:
                    async with node.client() as connection:
                        appended = await self.scripts.append(
                            keys=keys, args=args, client=connection
                        )
                        await durability.wait(connection, timeout_ms)
                    return appended
                except AskError:  # MOVED too: the slot is elsewhere now
                    if attempt:
                        raise
                    await self.redis.refresh_slots()  # type: ignore[attr-defined]
        async with self.redis.client() as connection:
            appended = await self.scripts.append(keys=keys, args=args, client=connection)
            await durability.wait(connection, timeout_ms)
        return appended

    async def earliest_offset(self, topic: str, partition: int) -> int:
        """The first offset still readable: in the archive if there is one, else in Redis."""
        return await self._earliest(
            topic, partition, (await self.state(topic, partition)).log_start
        )

    async def delete_records(self, topic: str, partition: int, before: int) -> int:
        """DeleteRecords: move the partition's log start up to offset ``before`` (the log
        end for HIGH_WATERMARK), deleting every record below it; returns the new low
        watermark (the earliest offset readable). An offset at or below the log start
        changes nothing, as in Kafka; one past the log end raises OffsetOutOfRange.

        The archive deletes first, then Redis raises its floor. A crash in between leaves
        the archive without offsets Redis may still serve: readers see the old log start
        until the delete is retried (or the archiver raises Redis' floor to the archive's);
        nothing they were told is gone comes back. The other order would let cold reads
        (and a restore after Redis lost its data) bring back records a reader had already
        seen deleted."""
        config = await self.topic(topic)
        if not 0 <= partition < config.partitions:
            raise UnknownTopic(f"unknown topic or partition: {topic}[{partition}]")
        if "delete" not in config.cleanup_policy:
            raise PolicyViolation(
                f"records of {topic} cannot be deleted: its cleanup.policy is "
                f"{','.join(config.cleanup_policy)}"
            )
        state = await self.state(topic, partition)
        offset = state.log_end if before == HIGH_WATERMARK else before
        if offset < 0:
            raise OffsetOutOfRange(
                f"offset {before} is not valid (-1 stands for the log end of {topic}[{partition}])"
            )
        if offset > state.log_end:
            raise OffsetOutOfRange(
                f"offset {offset} is past the log end {state.log_end} of {topic}[{partition}]"
            )
        if self.cold is not None:
            await self.cold.delete_records(topic, config.topic_id, partition, offset)
        return await self._earliest(
            topic, partition, await self.raise_floor(topic, partition, offset)
        )

    async def raise_floor(self, topic: str, partition: int, offset: int) -> int:
        """Redis' side of DeleteRecords (delete_records.lua): offsets below ``offset`` are
        deleted, the pages wholly below it freed; returns Redis' log start."""
        p = self.keys.partition(topic, partition)
        start = await self.scripts.delete_records(
            keys=[p.meta, p.index, p.stats], args=[p.prefix, offset]
        )
        await self.announce_change(topic)
        return start

    async def state(self, topic: str, partition: int) -> PartitionState:
        """Apply retention, then report offsets, pages and bytes held."""
        p = self.keys.partition(topic, partition)
        values = await self.scripts.state(keys=[p.meta, p.index, p.stats], args=[p.prefix])
        return PartitionState(*values)

    async def offset_for_timestamp(
        self, topic: str, partition: int, timestamp: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp`` (ms), in the
        archive below Redis' oldest offset first; None when there is none (ListOffsets by
        time)."""
        state = await self.state(topic, partition)  # raises UnknownTopic; applies retention
        if self.cold is not None and state.log_start > 0:  # else nothing is only archived
            cold_start = await self.cold.start_offset(topic, partition)
            if cold_start is not None and cold_start < state.log_start:
                found = await self.cold.find_time(topic, partition, timestamp, state.log_start)
                if found is not None:
                    return found
        p = self.keys.partition(topic, partition)
        start = state.log_start
        while True:
            batch = await self.scripts.find_time(
                keys=[p.index, p.meta, p.stats], args=[p.prefix, timestamp, start]
            )
            # The script skips batches ending before ``start``, so each round moves on.
            if batch is None or next_offset(batch) <= start:
                return None
            for record in decode_batch(batch):
                if record.offset >= start and record.timestamp >= timestamp:
                    return record.offset, record.timestamp
            # Only the records below the log start of a batch across it were that late.
            start = next_offset(batch)

    async def max_timestamp_offset(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp, the first of them
        on a tie (ListOffsets MAX_TIMESTAMP); None when no record has one. Only Redis is
        searched, as Kafka searches only its local segments, not the tiered ones."""
        state = await self.state(topic, partition)  # raises UnknownTopic; applies retention
        p = self.keys.partition(topic, partition)
        batch = await self.scripts.max_time(
            keys=[p.index, p.meta, p.stats], args=[p.prefix, state.log_start]
        )
        if batch is None:
            return None
        # A batch across the log start may owe its max timestamp to a deleted record.
        records = [r for r in decode_batch(batch) if r.offset >= state.log_start]
        if not records:
            return None
        best = max(records, key=lambda r: r.timestamp)  # max keeps the first on a tie
        return best.offset, best.timestamp

    async def last_archived_offset(self, topic: str, partition: int) -> int | None:
        """The last offset archived, as Redis last heard from the archiver (ListOffsets
        LATEST_TIERED); None without an archive or before anything was archived."""
        if self.cold is None:
            return None
        [archived] = await self._meta_values(topic, [partition], "archived")
        return archived - 1 if archived > 0 else None

    async def leader_epochs(self, topic: str, partitions: Iterable[int]) -> list[int]:
        """The current leader epoch of each of ``partitions`` (one round trip)."""
        return await self._meta_values(topic, partitions, "epoch")

    async def log_ends(self, topic: str, partitions: Iterable[int]) -> list[int]:
        """The log end offset of each of ``partitions`` (one round trip, no retention)."""
        return await self._meta_values(topic, partitions, "end")

    async def _meta_values(self, topic: str, partitions: Iterable[int], name: str) -> list[int]:
        pipe = self.redis.pipeline(transaction=False)
        for p in partitions:
            pipe.hget(self.keys.partition(topic, p).meta, name)
        return [int(v or 0) for v in await pipe.execute()]

    async def epoch_end_offset(self, topic: str, partition: int, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (the largest epoch <= ``epoch`` this partition had, the
        offset where it ended), or (-1, -1) for an epoch newer than the current one or an
        undefined (negative) one."""
        state = await self.state(topic, partition)
        if epoch == state.leader_epoch:
            return epoch, state.log_end
        if epoch > state.leader_epoch or epoch < 0:
            return -1, -1
        raw = await self.redis.hgetall(self.keys.partition(topic, partition).epochs)
        history = sorted([(0, 0)] + [(int(e), int(start)) for e, start in raw.items()])
        known = max(e for e, _ in history if e <= epoch)
        end = min((start for e, start in history if e > epoch), default=state.log_end)
        return known, end

    async def new_producer_id(self) -> int:
        """A producer id no other producer of this Redis has had, before or after a loss of
        its data: ids follow the clock (1,024 per millisecond, more when asked faster)."""
        floor = _now_ms() << 10
        return await self.scripts.producer_id(keys=[self.keys.producer_ids], args=[floor])

    async def sequence_counter(self, topic: str | None = None, partition: int = 0) -> int:
        """The highest global sequence number assigned so far. On a cluster, where each
        slot counts: the highest id the partition's slot has given (0 without ``topic``)."""
        if not self.cluster:
            return int(await self.redis.get(self.keys.gseq) or 0)
        if topic is None:
            return 0
        slot = slot_of(topic, partition)
        counter = await self.redis.hget(self.keys.slot_hash(slot), "seq")
        return record_id(int(counter), slot) if counter is not None else 0

    async def tick(self) -> int:
        """The archiver's tick on a cluster: the catalog's sequence floor raised to the
        catalog server's clock (tick.lua); returns it."""
        return await self.scripts.tick(
            keys=[self.keys.sequence_floor], args=[EPOCH_MS, STEPS_PER_MS]
        )

    async def tick_slots(self, slots: Iterable[int], floor: int) -> None:
        """Raise each slot's sequence counter to at least ``floor`` (slot_tick.lua),
        concurrently."""
        calls = [([self.keys.slot_hash(slot)], [floor]) for slot in sorted(set(slots))]
        for reply in await self.scripts.slot_tick.many(self.redis, calls):
            if isinstance(reply, Exception):
                raise reply

    async def restore(
        self, topics: list[RestoredTopic], sequence_floor: int, producer_id_floor: int
    ) -> None:
        """Bring Redis back to what the archive holds after it lost data (see restore.lua),
        raise the counters past every id the archive has seen, switch archiving on, and set
        the marker."""
        k = self.keys
        if self.cluster:  # the catalog, then each partition (kafkaesque/log_steps.py)
            await self._restore_in_steps(topics, sequence_floor)
            for t in topics:
                await self.announce_change(t.config.name)
            topics = []
        for t in topics:
            c = t.config
            parts = [k.partition(c.name, p) for p in range(len(t.partitions))]
            args: list[Any] = [c.name, c.pack(), c.lua_settings()]
            for p in t.partitions:
                args += (p.log_end, p.leader_epoch, p.log_start)
            await self.scripts.restore(
                keys=[
                    k.topics,
                    k.topic(c.name),
                    *(key for p in parts for key in (p.meta, p.index, p.stats)),
                ],
                args=args,
            )
            await self.announce_change(c.name)
        floors = [(k.producer_ids, producer_id_floor)]
        if not self.cluster:
            floors.append((k.gseq, sequence_floor))
        for key, floor in floors:
            current = int(await self.redis.get(key) or 0)
            if current < floor:
                await self.redis.incrby(key, floor - current)
        # Restored from an archive: archiving is on before the first append can close a page.
        await self.enable_archiving()
        await self.redis.set(k.incarnation, uuid.uuid4().hex, nx=True)
