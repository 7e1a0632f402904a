"""Topics, partitions and pages: the Python face of the Lua scripts.

The keys are named in kafkaesque/hot/keys.py and described in docs/redis-layout.md.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from redis.asyncio import Redis

from kafkaesque.clock import now_ms as _now_ms
from kafkaesque.errors import (
    OffsetOutOfRange,
    PolicyViolation,
    UnknownTopic,
)
from kafkaesque.hot.archiving import Archiving
from kafkaesque.hot.failover import EpochBump
from kafkaesque.hot.keys import is_cluster
from kafkaesque.hot.log_appends import Appends
from kafkaesque.hot.log_catalog import Catalog
from kafkaesque.hot.log_context import LogContext
from kafkaesque.hot.log_leaders import PartitionLeaders
from kafkaesque.hot.log_reads import Reads
from kafkaesque.hot.log_steps import Steps
from kafkaesque.hot.log_topics import Topics
from kafkaesque.hot.log_transactions import Transactions
from kafkaesque.hot.log_types import (
    ColdStore,
    PartitionState,
    RestoredTopic,
)
from kafkaesque.hot.sequence import EPOCH_MS, SLOT_BITS, STEPS_PER_MS, record_id
from kafkaesque.hot.slots import slot_of
from kafkaesque.hot.stores import Stores
from kafkaesque.records.batch import decode_batch, next_offset

# DeleteRecords' offset that stands for the high watermark (Kafka's tool: -1).
HIGH_WATERMARK = -1


class Log:
    """Topics and partitions kept in one Redis database, composed of parts that share one
    LogContext (kafkaesque.hot.log_context): the catalog and recovery
    (kafkaesque.hot.log_catalog.Catalog), topic changes (log_topics.Topics), appends
    (log_appends.Appends), reads (log_reads.Reads), the archiver's side
    (archiving.Archiving), a cluster's steps (log_steps.Steps), the leaders
    (log_leaders.PartitionLeaders), transactions and producers
    (log_transactions.Transactions). Their methods are this object's (bound in
    ``__init__``); what spans them is here.

    ``cold`` serves offsets Redis no longer holds (the archive). ``recover`` is called when
    Redis turns out to have lost its data, before any append; it must restore the offsets
    from the archive (``restore``). Without one, the log starts afresh.

    On a Redis Cluster (``cluster``; by default: whether ``redis`` is a cluster client) the
    keys take the cluster layout (kafkaesque.hot.keys) and record ids the per-slot clock
    (kafkaesque.hot.sequence).
    """

    def __init__(
        self,
        redis: Redis,
        namespace: str = "ks",
        cold: ColdStore | None = None,
        recover: Callable[[Log], Awaitable[None]] | None = None,
        cluster: bool | None = None,
    ) -> None:
        context = LogContext(
            redis, namespace, is_cluster(redis) if cluster is None else cluster, cold
        )
        self.context = context
        self.redis = redis
        self.ns = namespace
        self.cluster = context.cluster
        self.keys = context.keys
        self.scripts = context.scripts
        self._recover: Callable[[Log], Awaitable[None]] | None = None
        self.recover = recover
        # The stores beside the log (ACLs, quotas, offsets, ...), on the same client.
        self.stores = Stores(redis, self.keys)

        # The parts, each given the parts it calls.
        self.catalog = catalog = Catalog(context)
        self.steps = steps = Steps(context, catalog)
        self.topics = topics = Topics(context, catalog, steps)
        self.appends = appends = Appends(context, catalog)
        self.reads = reads = Reads(context)
        self.archiving = archiving = Archiving(context, steps)
        self.partition_leaders = leaders = PartitionLeaders(context)
        self.transactions = transactions = Transactions(context, catalog, appends)

        # Their methods, bound once: a call costs what a method of this class would.
        self.topic = catalog.topic
        self.topic_defaults = catalog.topic_defaults
        self.list_topics = catalog.list_topics
        self.topic_ids = catalog.topic_ids
        self.topic_configs = catalog.topic_configs
        self.announce_change = catalog.announce_change
        self.needs_recovery = catalog.needs_recovery
        self.ensure_recovered = catalog.ensure_recovered
        self.create_topic = topics.create_topic
        self.set_topic_defaults = topics.set_topic_defaults
        self.add_partitions = topics.add_partitions
        self.configure_topic = topics.configure_topic
        self.delete_topic = topics.delete_topic
        self.finish_steps = steps.finish_steps
        self.append = appends.append
        self.append_many = appends.append_many
        self.read = reads.read
        self.read_many = reads.read_many
        self.partition_offsets = reads.partition_offsets
        self.ids = archiving.ids
        self.enable_archiving = archiving.enable_archiving
        self.closed_pages = archiving.closed_pages
        self.replicated = archiving.replicated
        self.mark_archived = archiving.mark_archived
        self.release_archived = archiving.release_archived
        self.close_idle_pages = archiving.close_idle_pages
        self.first_unarchived_sequence = archiving.first_unarchived_sequence
        self.sequence_at = archiving.sequence_at
        self.leaders = leaders.leaders
        self.prefer = leaders.prefer
        self.lead = leaders.lead
        self.producers = transactions.producers
        self.end_transaction = transactions.end_transaction
        self.end_transactions = transactions.end_transactions
        self.open_transactions = transactions.open_transactions
        self.aborted_transactions = transactions.aborted_transactions
        self.last_stable_offset = transactions.last_stable_offset
        self.last_stable_offsets = transactions.last_stable_offsets

        if hasattr(redis, "on_switch"):  # through Sentinel: new epochs after a failover
            redis.on_switch(EpochBump(namespace, Log))

    # -- what is set from outside: in the context, where the parts read it -----------
    @property
    def cold(self) -> ColdStore | None:
        """The archive, serving offsets Redis no longer holds."""
        return self.context.cold

    @cold.setter
    def cold(self, cold: ColdStore | None) -> None:
        self.context.cold = cold

    @property
    def recover(self) -> Callable[[Log], Awaitable[None]] | None:
        """Restores the offsets from the archive after Redis lost its data (given this
        Log); None: the log starts afresh."""
        return self._recover

    @recover.setter
    def recover(self, recover: Callable[[Log], Awaitable[None]] | None) -> None:
        self._recover = recover
        self.context.recover = None if recover is None else functools.partial(recover, self)

    @property
    def node(self) -> str:
        """The broker appending through this log (kafkaesque.partition.leadership): its
        appends to a partition another broker leads are refused. "" (the CLI, tools):
        never refused."""
        return self.context.node

    @node.setter
    def node(self, node: str) -> None:
        self.context.node = node

    @property
    def capped(self) -> bool:
        """Whether reads stop at each partition's high watermark (where Redis replicas are
        required: kafkaesque/hot/high_watermark.py)."""
        return self.context.capped

    @capped.setter
    def capped(self, capped: bool) -> None:
        self.context.capped = capped

    @property
    def on_append(self) -> Callable[[str, int], None] | None:
        """Told of every append (topic, partition), where Redis replicas are required."""
        return self.context.on_append

    @on_append.setter
    def on_append(self, on_append: Callable[[str, int], None] | None) -> None:
        self.context.on_append = on_append

    @property
    def highest_sequence(self) -> int:
        """The highest sequence number appends through this Log were given (on a cluster,
        the floor of the next: one broker's successive appends get growing ids)."""
        return self.context.highest_sequence

    @highest_sequence.setter
    def highest_sequence(self, highest: int) -> None:
        self.context.highest_sequence = highest

    def channel(self, topic: str) -> str:
        """Pub/sub channel that carries the new log end after every append."""
        return self.keys.appended(topic)

    # -- partitions ---------------------------------------------------------------
    async def earliest_offset(self, topic: str, partition: int) -> int:
        """The first offset still readable: in the archive if there is one, else in Redis."""
        return await self.reads.earliest(
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
        return await self.reads.earliest(
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

    async def archived_ends(self, topic: str, partitions: Iterable[int]) -> list[int]:
        """The offset below which the archive holds each of ``partitions``, as Redis last
        heard from the archiver (one round trip; 0 before anything was archived)."""
        return await self._meta_values(topic, partitions, "archived")

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

    async def id_floor(self) -> tuple[int, list[tuple[str, int]]]:
        """The lowest record id an append that has not finished can still get, and every
        partition of every topic: what the archive watermark is computed from
        (storage_pg/gaps.py), with each partition's first unarchived id.

        On one Redis the sequence counter is read first: every id up to it was assigned by
        an append that had finished, into a partition listed after. On a cluster, with a
        counter per slot (docs/scale-out.md 3.5): the catalog's tick T first, then the
        topics, then every slot of their partitions raised to T, so every record not
        archived by then has an id above (T + 1) * 2^14 - 1 or above its partition's first
        unarchived one."""
        if self.cluster:
            tick = await self.tick()
            lowest = (tick + 1) << SLOT_BITS
        else:
            lowest = await self.sequence_counter() + 1
        partitions = []
        for name in await self.list_topics():
            try:
                config = await self.topic(name)
            except UnknownTopic:
                continue
            partitions += [(name, p) for p in range(config.partitions)]
        if self.cluster:  # every slot past the tick before any partition is read
            await self.tick_slots((slot_of(name, p) for name, p in partitions), tick)
        return lowest, partitions

    async def restore(
        self, topics: list[RestoredTopic], sequence_floor: int, producer_id_floor: int
    ) -> None:
        """Bring Redis back to what the archive holds after it lost data (see restore.lua),
        raise the counters past every id the archive has seen, switch archiving on, and set
        the marker."""
        k = self.keys
        if self.cluster:  # the catalog, then each partition (kafkaesque/hot/log_steps.py)
            await self.steps.restore_in_steps(topics, sequence_floor)
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
