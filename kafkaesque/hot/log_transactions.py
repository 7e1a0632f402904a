"""Transactions and idempotent producers, for kafkaesque.hot.log.Log: the producers'
sequence state, the markers that end a transaction (end_txn.lua; with the coordinator's
state in one call, txn_end.lua), open and aborted
transactions, and the last stable offset."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple, cast

from redis.exceptions import ResponseError

from kafkaesque.clock import now_ms as _now_ms
from kafkaesque.errors import KafkaesqueError, UnknownTopic
from kafkaesque.hot.log_appends import Appends
from kafkaesque.hot.log_catalog import Catalog
from kafkaesque.hot.log_context import LogContext, LogPart
from kafkaesque.hot.log_types import ProducerState
from kafkaesque.hot.redis_errors import from_lua
from kafkaesque.hot.txn_states import StateWrite
from kafkaesque.records.build import build_control_batch
from kafkaesque.txn.transaction import Transaction


def _second(pair: tuple[int, int]) -> int:
    return pair[1]


def aborted_entry(entry: bytes) -> tuple[int, int, int]:
    """An aborted index entry "pid:first:last" as (producer id, first, last offset)."""
    pid, first, last = entry.split(b":")
    return int(pid), int(first), int(last)


class _Marker(NamedTuple):
    """A transaction's COMMIT or ABORT marker, the same on every partition it ends."""

    producer_id: int
    producer_epoch: int
    commit: bool
    batch: bytes  # the control batch
    transaction: int | None  # the coordinator's serial number of the transaction


class Transactions(LogPart):
    """The transactional and idempotent side of a partition's state, for
    kafkaesque.hot.log.Log; markers are sequenced as ``appends`` sequences its appends, and
    written through ``catalog``'s recovery-guarded call."""

    def __init__(self, context: LogContext, catalog: Catalog, appends: Appends) -> None:
        super().__init__(context)
        self.catalog = catalog
        self.appends = appends

    async def producers(self, topic: str, partition: int) -> list[ProducerState]:
        """The idempotent producers the partition keeps sequence state for (append.lua's
        "epoch first:last:offset ..." per id, newest batch last), by producer id; raises
        UnknownTopic for a partition that does not exist."""
        p = self.keys.partition(topic, partition)
        pipe = self.redis.pipeline(transaction=True)  # one view of the two keys
        pipe.exists(p.meta)
        pipe.hgetall(p.producers)
        pipe.zrange(p.producers_seen, 0, -1, withscores=True)
        exists, states, seen = await pipe.execute()
        if not exists:
            raise UnknownTopic(f"unknown topic or partition: {topic}[{partition}]")
        used = {int(pid): int(ms) for pid, ms in seen}
        found = []
        for pid, raw in states.items():
            epoch, *batches = raw.decode().split()
            # A producer with no batch kept has no sequence yet: Kafka's -1.
            last = int(batches[-1].split(":")[1]) if batches else -1
            found.append(ProducerState(int(pid), int(epoch), last, used.get(int(pid), -1)))
        return sorted(found, key=lambda s: s.producer_id)

    async def end_transaction(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int = 0,
        transaction: int | None = None,
    ) -> tuple[int, int]:
        """Write the producer's COMMIT or ABORT marker (end_txn.lua): its transaction on
        the partition ends, an abort goes into the aborted index; from then on appends
        verified in ``transaction`` (its serial number) are refused here. Returns (log
        start, the marker's offset); raises InvalidProducerEpoch for an epoch older than
        the producer's here, UnknownTopic."""
        batch = build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch)
        marker = _Marker(producer_id, producer_epoch, commit, batch, transaction)
        keys, args = self._marker_call(topic, partition, marker)
        start, offset = await self.catalog.call(self.scripts.end_txn, keys, args)
        on_append = self.context.on_append
        if on_append is not None:
            on_append(topic, partition)
        return start, offset

    def _marker_call(
        self, topic: str, partition: int, marker: _Marker
    ) -> tuple[list[str], list[object]]:
        """marker.lua's keys and arguments for one partition."""
        k = self.keys
        p = k.partition(topic, partition)
        now = _now_ms()
        sequence, recovery, floor = self.appends.sequencing(topic, partition, now)
        keys = [p.meta, p.index, p.stats, sequence, p.producers, recovery]
        keys += [p.txn_open, p.txn_aborted, p.txn_ended]
        args: list[object] = [p.prefix, k.appended(topic), now, marker.producer_id]
        args += [marker.producer_epoch, int(marker.commit), marker.batch, floor]
        args.append("" if marker.transaction is None else marker.transaction)
        return keys, args

    async def end_transactions(
        self,
        partitions: Sequence[tuple[str, int]],
        txn: Transaction,
        state: StateWrite,
        commit: bool,
        droppable: Iterable[str],
    ) -> tuple[str, dict[tuple[str, int], KafkaesqueError | None]]:
        """EndTxn in one script on one Redis (txn_end.lua): ``txn``'s markers on every
        partition, its state saved prepared, then complete (``txn`` is the prepared state;
        ``state`` says what it was read as). Returns ('busy' or 'changed', {}) with nothing
        written when a broker holds the id's lock or the state changed since it was read;
        else ('done', or 'prepared' when a partition refused its marker with an error not
        named in ``droppable`` (LUA_ERRORS names): the transaction is left prepared) and
        each partition's refusal or None."""
        batch = build_control_batch(txn.producer_id, txn.producer_epoch, commit, 0)
        marker = _Marker(txn.producer_id, txn.producer_epoch, commit, batch, txn.serial)
        prepared, done = state.fields(txn), state.fields(txn.completed())
        deadline = txn.deadline_ms()
        keys = list(state.keys)
        args: list[object] = [*state.read_as, " ".join(droppable)]
        args += ["" if deadline is None else deadline, len(prepared), *prepared]
        args += [len(done), *done]
        for topic, partition in partitions:
            marker_keys, marker_args = self._marker_call(topic, partition, marker)
            keys += marker_keys
            args += marker_args
        status, *replies = await self.scripts.txn_end(keys=keys, args=args)
        if status in (b"busy", b"changed"):
            return status.decode(), {}
        results: dict[tuple[str, int], KafkaesqueError | None] = {}
        on_append = self.context.on_append
        for (topic, partition), reply in zip(partitions, replies, strict=True):
            if isinstance(reply, bytes):  # the refusal's "NAME text"
                error = from_lua(ResponseError(reply.decode()))
                results[topic, partition] = (
                    error if isinstance(error, KafkaesqueError) else KafkaesqueError(str(error))
                )
            else:
                results[topic, partition] = None
                if on_append is not None:
                    on_append(topic, partition)
        return status.decode(), results

    async def open_transactions(self, topic: str, partition: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of each transaction open on the partition, oldest
        first; raises UnknownTopic for a partition that does not exist."""
        p = self.keys.partition(topic, partition)
        pipe = self.redis.pipeline(transaction=True)
        pipe.exists(p.meta)
        pipe.hgetall(p.txn_open)
        exists, found = await pipe.execute()
        if not exists:
            raise UnknownTopic(f"unknown topic or partition: {topic}[{partition}]")
        return sorted(((int(pid), int(first)) for pid, first in found.items()), key=_second)

    async def aborted_transactions(
        self, topic: str, partition: int, first: int = 0
    ) -> list[tuple[int, int, int]]:
        """(producer id, first offset, ABORT marker's offset) of the aborted transactions
        Redis still knows that end at or after ``first``, by their end."""
        p = self.keys.partition(topic, partition)
        # Replies are bytes, and without scores the range is a list of members.
        entries = cast("list[bytes]", await self.redis.zrangebyscore(p.txn_aborted, first, "+inf"))
        return [aborted_entry(e) for e in entries]

    async def last_stable_offset(self, topic: str, partition: int) -> int:
        """The first offset of the oldest open transaction, else the log end."""
        [lso] = await self.last_stable_offsets(topic, [partition])
        return lso

    async def last_stable_offsets(self, topic: str, partitions: Iterable[int]) -> list[int]:
        """The last stable offset of each of ``partitions`` (one round trip); raises
        UnknownTopic if one does not exist."""
        numbers = list(partitions)
        # One MULTI on a single Redis; a cluster's partitions are in slots of their own.
        pipe = self.redis.pipeline(transaction=not self.cluster)
        for number in numbers:
            p = self.keys.partition(topic, number)
            pipe.hmget(p.meta, "end", "start", "floor")
            pipe.hvals(p.txn_open)
        replies = await pipe.execute()
        found = []
        for number, (end, start, floor), firsts in zip(
            numbers, replies[::2], replies[1::2], strict=True
        ):
            if end is None:
                raise UnknownTopic(f"unknown topic or partition: {topic}[{number}]")
            # Not below the log start: a transaction whose start DeleteRecords or
            # retention removed holds no reader back there (partition_read.lua).
            oldest = min([int(end), *map(int, firsts)])
            found.append(max(oldest, int(start or 0), int(floor or 0)))
        return found
