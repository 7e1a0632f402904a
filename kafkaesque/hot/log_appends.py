"""Appends: checked batches to one partition or many, atomically each (append.lua)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.exceptions import AskError

from kafkaesque.clock import now_ms as _now_ms
from kafkaesque.errors import (
    KafkaesqueError,
    NeedsRecovery,
    SequenceAhead,
    UnknownProducerId,
    UnknownTopic,
)
from kafkaesque.hot.durability import DEFAULT_TIMEOUT_MS, Durability, DurableAppends
from kafkaesque.hot.keys import is_cluster, serving
from kafkaesque.hot.log_catalog import Catalog
from kafkaesque.hot.log_context import LogContext, LogPart
from kafkaesque.hot.log_types import LogAppended
from kafkaesque.hot.pipelined import Pieces
from kafkaesque.hot.scripts import source
from kafkaesque.hot.sequence import clock
from kafkaesque.hot.slots import slot_of
from kafkaesque.hot.tier import HotTier
from kafkaesque.records.batch import (
    PLACED_PREFIX,
    offset_count,
    placed_prefix,
    producer_fields,
    with_base_offset,
)


class Appends(LogPart):
    """Appending to partitions, for kafkaesque.hot.log.Log; the append script runs through
    ``catalog``'s recovery-guarded call."""

    def __init__(self, context: LogContext, catalog: Catalog) -> None:
        super().__init__(context)
        # The offsets the next appends should get, written into their batches so that
        # Redis need not rewrite them (OffsetGuesses, below).
        self.guesses = OffsetGuesses()
        self._call = catalog.call
        self._ensure_recovered = catalog.ensure_recovered
        self._durable: DurableAppends | None = None
        # Placed batches may go as Pieces where the script's calls are packed here
        # (kafkaesque.hot.pipelined), not by redis-py.
        self._pieces = self.scripts.shared is not None

    async def append(
        self,
        topic: str,
        partition: int,
        batches: Sequence[bytes],
        durability: Durability | None = None,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        transaction: int | None = None,
    ) -> LogAppended:
        """Append checked RecordBatch v2 batches atomically; returns their base offsets.
        With ``durability`` it returns only once the append is on disk / at the replicas
        as that asks (raising NotDurable after ``timeout_ms``; the append stays); with
        fewer replicas in sync than it asks, NotEnoughReplicas and nothing written.

        Batches of idempotent producers (producer id >= 0) are sequence-checked: a retry of
        one of a producer's last five batches returns its original offset and is not written
        again; a gap, an old epoch or an unknown producer in mid-sequence (its state was
        lost) raises a ProducerFenced subclass and writes nothing.

        ``transaction``: the serial number of the transaction the transactional batches'
        producer was verified in (TransactionCoordinator.verify_for_append); if that
        transaction's marker is already on the partition, TransactionNotOpen, nothing
        written."""
        placed, guess = self.guesses.place(topic, partition, batches, self._pieces)
        replicas = 0 if durability is None else durability.replicas
        keys, args = self._append_call(
            topic, partition, batches, transaction, replicas, sent=placed
        )
        try:
            if durability is None or not durability.waits:
                reply = await self._call(self.scripts.append, keys, args)
            else:
                reply = await self._call(
                    functools.partial(self._append_durably, durability, timeout_ms), keys, args
                )
        except SequenceAhead as exc:
            raise await self._sequence_ahead(topic, partition, batches, exc) from None
        appended = self._appended(topic, partition, batches, guess, reply)
        if self.context.capped and durability is not None and durability.replicas:
            # Kafka completes an acks=all produce once the high watermark passes its
            # records, so a reader sees every acknowledged record: the WAIT just made
            # covers them and everything before (kafkaesque/hot/high_watermark.py).
            end = appended.base_offsets[-1] + offset_count(batches[-1])
            p = self.keys.partition(topic, partition)
            await self.scripts.hw_raise(keys=[p.meta], args=[end, self.keys.appended(topic)])
        return appended

    def _durable_appends(self) -> DurableAppends | None:
        """acks=all's shared connection and its waits (made on first use), on one Redis
        whose client pipelines scripts; None elsewhere."""
        if self._durable is None and not self.cluster and self.scripts.shared is not None:
            connection = cast("HotTier", self.redis).durable_pipelined()
            connection.preload(source("append"))  # no NOSCRIPT retry out of order
            self._durable = DurableAppends(connection, self.scripts.append)
        return self._durable

    def _appended(
        self, topic: str, partition: int, batches: Sequence[bytes], guess: Guess | None, reply: Any
    ) -> LogAppended:
        """append.lua's reply {log start, last sequence, epoch, base offsets...}: the
        sequence and the epoch noted, the offsets answered."""
        start, last, epoch, *bases = reply
        context = self.context
        if last > context.highest_sequence:
            context.highest_sequence = last
        self.guesses.learn(topic, partition, guess, bases, batches, epoch)
        on_append = context.on_append
        if on_append is not None:
            on_append(topic, partition)
        return LogAppended(bases, start)

    async def _sequence_ahead(
        self, topic: str, partition: int, batches: Sequence[bytes], exc: SequenceAhead
    ) -> KafkaesqueError:
        """What to answer a batch ahead of its producer's sequence: "not yet" (the missing
        batch was refused and will be retried), unless the producer's newest batch here is
        older than the partition's epoch and a failover began that epoch
        (kafkaesque.hot.failover): then the missing batches were acknowledged and lost with
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
        self,
        appends: Sequence[tuple[str, int, Sequence[bytes]]],
        transaction: int | None = None,
    ) -> list[LogAppended | KafkaesqueError]:
        """Append to many partitions in one pipelined round trip, each atomically as
        ``append`` (without durability waits: they cover one connection's writes, and
        a pipeline may not run on the one the waits would be sent on). One result per
        (topic, partition, batches): its LogAppended, or the core error that refused it."""
        placed = [
            self.guesses.place(topic, partition, batches, self._pieces)
            for topic, partition, batches in appends
        ]
        calls = [
            self._append_call(topic, partition, batches, transaction, sent=sent)
            for (topic, partition, batches), (sent, _) in zip(appends, placed, strict=True)
        ]
        replies = await self.scripts.append.many(self.redis, calls)
        lost = [i for i, reply in enumerate(replies) if isinstance(reply, NeedsRecovery)]
        if lost:  # Redis lost its data: none of those ran; recover, then append them
            await self._ensure_recovered()
            again = await self.scripts.append.many(self.redis, [calls[i] for i in lost])
            for i, reply in zip(lost, again, strict=True):
                if self.cluster and isinstance(reply, NeedsRecovery):  # see _call
                    reply = UnknownTopic(f"unknown topic or partition: {appends[i][0]}")
                replies[i] = reply
        results: list[LogAppended | KafkaesqueError] = []
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
                results.append(self._appended(topic, partition, batches, guess, reply))
        return results

    def sequencing(self, topic: str, partition: int, now: int) -> tuple[str, str, int]:
        """The sequence key, recovery marker and sequence floor of an append (append.lua):
        on one Redis the counter, the incarnation and 0; on a cluster the slot's hash, the
        partition's meta (the catalog's incarnation is checked before, in Python: a shard
        that lost the partition answers it unknown) and the clock, never below what this
        Log was given."""
        k = self.keys
        if not self.cluster:
            return k.gseq, k.incarnation, 0
        floor = max(clock(now), self.context.highest_sequence + 1)
        return k.slot_hash(slot_of(topic, partition)), k.partition(topic, partition).meta, floor

    def _append_call(
        self,
        topic: str,
        partition: int,
        batches: Sequence[bytes],
        transaction: int | None = None,
        replicas: int = 0,
        sent: Sequence[bytes | Pieces] | None = None,
    ) -> tuple[list[str], list[object]]:
        """append.lua's keys and arguments; ``replicas``: how many Redis replicas must be
        in sync for the append to be made (acks=all's, checked in the script); ``sent``:
        the batches as placed (OffsetGuesses.place), sent instead of ``batches``, whose
        fields they share."""
        k = self.keys
        p = k.partition(topic, partition)
        now = _now_ms()
        sequence, marker, floor = self.sequencing(topic, partition, now)
        serial = "" if transaction is None else transaction
        node = self.context.node
        args: list[object] = [p.prefix, k.appended(topic), now, floor, node, serial, replicas]
        for batch, placed in zip(batches, batches if sent is None else sent, strict=True):
            args += (offset_count(batch), *producer_fields(batch), placed)
        keys = [p.meta, p.index, p.stats, sequence, p.producers, marker, p.txn_open, p.txn_ended]
        return keys, args

    async def _append_durably(
        self, durability: Durability, timeout_ms: int, keys: list[str], args: list[Any]
    ) -> Any:
        """The append script, then the waits on the same connection: WAITAOF and WAIT
        only cover the writes of their own connection. On one Redis, the connection
        acks=all's appends share, one wait for all those answered before it
        (DurableAppends); on a cluster, a connection to the node serving the partition
        (its slot map read again once if the slot moved)."""
        durable = self._durable_appends()
        if durable is not None:
            return await durable.append(durability, timeout_ms, keys, args)
        moved = False
        while True:
            server = await serving(self.redis, keys[0])
            try:
                async with server.client() as connection:
                    appended = await self.scripts.append(keys=keys, args=args, client=connection)
                    await durability.wait(connection, timeout_ms)
                return appended
            except AskError:  # MOVED too: the slot is elsewhere now (a cluster only)
                if moved or not is_cluster(self.redis):
                    raise
                moved = True
                await self.redis.refresh_slots()  # type: ignore[attr-defined]


# -- offsets written in ahead ------------------------------------------------------------
# Batches sent to Redis with the offsets they will get already written in.
#
# append.lua writes each batch's baseOffset and partitionLeaderEpoch (kafkaesque.records.batch
# has the layout). Rewriting them in Lua builds two new strings the size of the batch, and
# Valkey hashes every byte of a Lua string: for a batch of 1 MB that was half of the
# append's Redis time (docs/benchmarks.md). A batch that arrives with the right values is
# stored as sent. So a Log keeps, per partition it appends to, the offset its next batch
# should get and the partition's leader epoch, and writes them into the batches it sends.
#
# A guess is only ever a guess: append.lua compares the bytes and rewrites them when they
# differ (another writer appended, an idempotent retry took its old offset, a failover
# raised the epoch), which is what every append cost before. The reply tells the truth,
# and the next guesses follow it.


# Smaller batches are sent as they are: Lua rewrites them for about what the copy here
# would cost.
PLACE_FROM = 1024
# Partitions remembered at most (each entry is small; a topic deleted elsewhere leaves its
# entries behind): past it they are all forgotten and learnt again from the next replies.
MAX_PARTITIONS = 100_000


@dataclass(slots=True)
class Guess:
    """What one append was sent with: the first batch's offset, under a generation."""

    base: int
    generation: int


@dataclass(slots=True)
class _Next:
    offset: int  # after every append sent so far
    epoch: int
    generation: int  # bumped on every correction: guesses made before it are stale


class OffsetGuesses:
    """Per partition, the offset and leader epoch this Log's next batch should get."""

    def __init__(self) -> None:
        self._next: dict[tuple[str, int], _Next] = {}
        self._generations = itertools.count(1)

    def place(
        self, topic: str, partition: int, batches: Sequence[bytes], pieces: bool = False
    ) -> tuple[Sequence[bytes | Pieces], Guess | None]:
        """The batches with their expected offsets and the epoch written in (those of
        PLACE_FROM bytes or more), and the guess to give ``learn`` with the reply; the
        batches as they are and None before the partition's first reply. ``pieces``:
        a placed batch is its new first bytes and a view of the rest (Pieces, for a
        command packed by kafkaesque.hot.pipelined), not a copy of the batch."""
        nxt = self._next.get((topic, partition))
        if nxt is None:
            return batches, None
        guess = Guess(nxt.offset, nxt.generation)
        placed: list[bytes | Pieces] = []
        offset = nxt.offset
        for batch in batches:
            if len(batch) < PLACE_FROM:
                placed.append(batch)
            elif pieces:
                prefix = placed_prefix(batch, offset, nxt.epoch)
                placed.append(Pieces((prefix, memoryview(batch)[PLACED_PREFIX:])))
            else:
                placed.append(with_base_offset(batch, offset, nxt.epoch))
            offset += offset_count(batch)
        nxt.offset = offset  # a pipelined append sent before this one's reply follows it
        return placed, guess

    def learn(
        self,
        topic: str,
        partition: int,
        guess: Guess | None,
        bases: Sequence[int],
        batches: Sequence[bytes],
        epoch: int,
    ) -> None:
        """An append's reply: its ``batches``' base offsets and the partition's epoch."""
        if not bases:
            return
        key = (topic, partition)
        nxt = self._next.get(key)
        if nxt is None:
            if len(self._next) >= MAX_PARTITIONS:
                self._next.clear()
            end = bases[-1] + offset_count(batches[-1])
            self._next[key] = _Next(end, epoch, next(self._generations))
        elif guess is not None and guess.generation == nxt.generation:
            nxt.epoch = epoch
            if bases[0] != guess.base:
                # Every append sent since was guessed as wrongly: shift them all once;
                # their replies (of the old generation) correct nothing more.
                nxt.offset += bases[0] - guess.base
                nxt.generation = next(self._generations)
