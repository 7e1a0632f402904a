"""The transaction coordinator: its Redis store, lock, marker writes and timeouts.

The rules live in kafkaesque/transactions.py (a pure state machine); this module loads a
transactional id's state (one hash), applies one transition under a short per-id Redis
lock and saves it, so every broker process on the same Redis coordinates the same ids and
the state survives a restart. Ending a transaction is two steps, as in Kafka: the
PrepareCommit/PrepareAbort state is saved first, then the markers are written to every
partition (``MarkerWriter``, the partition layer) and pending offsets committed or
dropped, then CompleteCommit/CompleteAbort is saved. A broker that dies in between leaves
the prepared state, which the next access to the id, or any broker's periodic ``tick``,
rolls forward. Offsets a transaction commits (TxnOffsetCommit) wait in the group's
``txnoffsets`` hash until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, cast

from redis.asyncio import Redis
from redis.exceptions import LockError

from kafkaesque.clock import now_ms as _now_ms
from kafkaesque.errors import Code, InvalidProducerEpoch, KafkaesqueError, UnknownTopic
from kafkaesque.groups import GroupCoordinator
from kafkaesque.log import Log
from kafkaesque.outage import REDIS, REDIS_CONNECTION_ERRORS
from kafkaesque.transactions import PREPARING, Transaction, TxnConfig, TxnState
from kafkaesque.txn_offsets import TopicPartition, TxnOffsetStore

log = logging.getLogger(__name__)

INVALID_REGULAR_EXPRESSION = 128  # ListTransactions v2's pattern


class MarkerWriter(Protocol):
    """The log side: appends a transaction's COMMIT or ABORT control batch to partitions
    (kafkaesque/partitions.py ``Partitions``)."""

    async def write_markers(
        self,
        partitions: Iterable[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int = 0,
        transaction: int | None = None,
    ) -> dict[TopicPartition, KafkaesqueError | None]: ...


@dataclass(frozen=True, slots=True)
class InitResult:
    error: Code
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Listing:
    """ListTransactions' answer: the matching ids, and the state filters not known."""

    transactions: list[Transaction]
    unknown_states: list[str]
    error: int = 0


class TransactionCoordinator(TxnOffsetStore):
    """Kafka's TransactionCoordinator over Redis; ``tick`` is its periodic work."""

    def __init__(
        self,
        log: Log,
        markers: MarkerWriter,
        groups: GroupCoordinator,
        config: TxnConfig | None = None,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self.log = log
        self.redis: Redis = log.redis
        self.keys = log.keys
        self.markers = markers
        self.groups = groups
        self.config = config or TxnConfig()
        self.clock = clock  # milliseconds; tests move it to time transactions out

    # -- storage ----------------------------------------------------------------------
    async def load(self, transactional_id: str) -> Transaction | None:
        raw = await self.redis.hgetall(self.keys.transaction(transactional_id))
        fields = cast("dict[bytes, bytes]", raw)  # replies are bytes
        return Transaction.from_fields(transactional_id, fields) if fields else None

    async def _save(self, txn: Transaction) -> None:
        """The state and the id sets in one MULTI; on a Redis Cluster, where the state's
        slot is the id's own, the sets are kept supersets instead (added to before the
        state is written, removed from after): a reader meets at worst an id with
        nothing due, which it skips, never misses one."""
        tid = txn.transactional_id
        deadline = txn.deadline_ms()
        if self.keys.cluster:
            index = self.redis.pipeline(transaction=False)
            index.sadd(self.keys.transactions, tid)
            if deadline is not None:
                index.zadd(self.keys.transactions_due, {tid: deadline})
            await index.execute()
            await self.redis.hset(self.keys.transaction(tid), mapping=txn.fields())
            if deadline is None:
                await self.redis.zrem(self.keys.transactions_due, tid)
            return
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.keys.transaction(tid), mapping=txn.fields())
        pipe.sadd(self.keys.transactions, tid)
        if deadline is None:
            pipe.zrem(self.keys.transactions_due, tid)
        else:
            pipe.zadd(self.keys.transactions_due, {tid: deadline})
        await pipe.execute()

    async def _drop(self, transactional_id: str) -> None:
        pipe = self.redis.pipeline(transaction=not self.keys.cluster)  # see _save
        pipe.delete(self.keys.transaction(transactional_id))
        pipe.srem(self.keys.transactions, transactional_id)
        pipe.zrem(self.keys.transactions_due, transactional_id)
        await pipe.execute()

    @contextlib.asynccontextmanager
    async def _locked(self, transactional_id: str) -> AsyncIterator[None]:
        """The id's lock for one read-modify-write (markers included); its timeout frees
        it if a process dies holding it. Raises LockError if it cannot be had in time."""
        lock = self.redis.lock(
            self.keys.transaction(transactional_id, ":lock"), timeout=15, blocking_timeout=15
        )
        async with lock:
            yield

    async def _finish(self, txn: Transaction) -> bool:
        """Write the prepared transaction's markers, settle its pending offsets, save it
        complete. False (state left prepared, retried later) if a partition failed."""
        commit = txn.state == TxnState.PREPARE_COMMIT
        if txn.partitions:
            results = await self.markers.write_markers(
                sorted(txn.partitions),
                txn.producer_id,
                txn.producer_epoch,
                commit,
                transaction=txn.serial,
            )
            # Dropped, as Kafka's marker channel does: a deleted topic's markers, and those
            # a partition refuses because the producer has a newer epoch there (it moved
            # on; its newer epoch's markers end what it has open there).
            failed = {
                tp: e
                for tp, e in results.items()
                if e is not None and not isinstance(e, UnknownTopic | InvalidProducerEpoch)
            }
            for (topic, partition), e in sorted(results.items()):
                if isinstance(e, InvalidProducerEpoch):
                    log.info(
                        "transaction %r: %s-%d refused its marker (%s): dropped",
                        txn.transactional_id,
                        topic,
                        partition,
                        e,
                    )
            if failed:
                log.warning(
                    "transaction %r: markers not written, will retry: %s",
                    txn.transactional_id,
                    "; ".join(f"{t}-{p}: {e}" for (t, p), e in sorted(failed.items())),
                )
                return False
        for group_id in sorted(txn.groups):
            await self._settle_offsets(group_id, txn.transactional_id, commit)
        txn.complete(self.clock())
        await self._save(txn)
        return True

    async def _settle(self, txn: Transaction) -> bool:
        """Roll a prepared transaction forward (its broker died, or its markers failed);
        True when nothing is left to finish."""
        if txn.state not in PREPARING:
            return True
        log.info("completing transaction %r (%s)", txn.transactional_id, txn.state)
        return await self._finish(txn)

    # -- InitProducerId ---------------------------------------------------------------
    async def init_producer(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> InitResult:
        """A transactional producer's id and new epoch; the previous epoch's open
        transaction is aborted first (zombie fencing). ``expected``: the id and epoch the
        producer had (KIP-360)."""
        if not transactional_id:
            return InitResult(Code.INVALID_REQUEST)
        error = self.config.timeout_error(timeout_ms)
        if error:
            return InitResult(error)
        try:
            async with self._locked(transactional_id):
                return await self._init(transactional_id, timeout_ms, expected)
        except LockError:
            return InitResult(Code.CONCURRENT_TRANSACTIONS)

    async def _init(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> InitResult:
        now = self.clock()
        txn = await self.load(transactional_id)
        if txn is None or txn.state == TxnState.DEAD:
            txn = Transaction(transactional_id, await self.log.new_producer_id(), updated_ms=now)
        error = txn.init_error(expected)
        if error:
            return InitResult(error)
        if txn.state == TxnState.ONGOING:
            log.info("fencing transactional id %r: aborting its open transaction", transactional_id)
            txn.fence(now)
            await self._save(txn)
        if not await self._settle(txn):
            return InitResult(Code.CONCURRENT_TRANSACTIONS)  # Kafka's "retry"
        if txn.needs_new_id(expected):
            txn.rotate(await self.log.new_producer_id(), timeout_ms, now, expected is not None)
        else:
            error = txn.bump(timeout_ms, None if expected is None else expected[1], now)
            if error:
                return InitResult(error)
        await self._save(txn)
        return InitResult(Code.NONE, txn.producer_id, txn.producer_epoch)

    # -- AddPartitionsToTxn, AddOffsetsToTxn --------------------------------------------
    async def _unknown(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        counts: dict[str, int] = {}
        for topic in {t for t, _ in partitions}:
            try:
                counts[topic] = (await self.log.topic(topic)).partitions
            except UnknownTopic:
                counts[topic] = 0
        return {(t, p) for t, p in partitions if not 0 <= p < counts[t]}

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, Code]:
        """Add partitions to the transaction (opening it); per partition its code. A
        partition that does not exist fails the request: UNKNOWN_TOPIC_OR_PARTITION for
        it, OPERATION_NOT_ATTEMPTED for the others, nothing added."""
        wanted = set(partitions)

        def every(code: Code) -> dict[TopicPartition, Code]:
            return dict.fromkeys(wanted, code)

        if not transactional_id:
            return every(Code.INVALID_REQUEST)
        unknown = await self._unknown(wanted)
        if unknown:
            return {
                tp: Code.UNKNOWN_TOPIC_OR_PARTITION
                if tp in unknown
                else Code.OPERATION_NOT_ATTEMPTED
                for tp in wanted
            }
        return every(await self._add(transactional_id, producer_id, producer_epoch, wanted, set()))

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> Code:
        """Add a group's offsets to the transaction (TxnOffsetCommit may then store them)."""
        if not transactional_id:
            return Code.INVALID_REQUEST
        return await self._add(transactional_id, producer_id, producer_epoch, set(), {group_id})

    async def _add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[TopicPartition],
        groups: set[str],
    ) -> Code:
        try:
            async with self._locked(transactional_id):
                txn = await self.load(transactional_id)
                if txn is None:
                    return Code.INVALID_PRODUCER_ID_MAPPING
                if txn.producer_error(producer_id, producer_epoch) == Code.NONE:
                    await self._settle(txn)
                error = txn.add(producer_id, producer_epoch, self.clock(), partitions, groups)
                if not error:
                    await self._save(txn)
                return error
        except LockError:
            return Code.CONCURRENT_TRANSACTIONS

    async def verify_for_append(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> tuple[dict[TopicPartition, Code], int]:
        """Whether each partition is in the ongoing transaction (NONE) or not
        (INVALID_TXN_STATE), nothing changed (AddPartitionsToTxn v4+ verify_only, and
        Produce's check); and the serial number of the transaction verified: a Produce
        appends with it (Log.append's ``transaction``), so that its batches are refused
        on a partition where that transaction's marker got first (Kafka's verification
        guard)."""
        wanted = set(partitions)
        txn = await self.load(transactional_id) if transactional_id else None
        error = (
            Code.INVALID_PRODUCER_ID_MAPPING
            if txn is None
            else txn.verify(producer_id, producer_epoch)
        )
        if error or txn is None:
            return dict.fromkeys(wanted, error), -1
        outcome = {
            tp: Code.NONE if tp in txn.partitions else Code.INVALID_TXN_STATE for tp in wanted
        }
        return outcome, txn.serial

    # -- EndTxn -----------------------------------------------------------------------
    async def end(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> Code:
        """Commit or abort the open transaction: PrepareCommit/PrepareAbort is saved, then
        the markers and offsets are written and the transaction completes. Markers that
        fail are retried by ``tick``; the prepared state alone makes the outcome certain."""
        if not transactional_id:
            return Code.INVALID_REQUEST
        try:
            async with self._locked(transactional_id):
                txn = await self.load(transactional_id)
                if txn is None:
                    return Code.INVALID_PRODUCER_ID_MAPPING
                if txn.producer_error(producer_id, producer_epoch) == Code.NONE:
                    await self._settle(txn)  # an earlier end whose broker died
                error = txn.end(producer_id, producer_epoch, commit, self.clock())
                if error or txn.state not in PREPARING:
                    return error
                await self._save(txn)
                await self._finish(txn)
                return Code.NONE
        except LockError:
            return Code.CONCURRENT_TRANSACTIONS

    # -- admin ----------------------------------------------------------------------------
    async def describe(self, transactional_id: str) -> Transaction | None:
        return await self.load(transactional_id)

    async def all(self) -> list[Transaction]:
        # Replies are bytes: the client does not decode them.
        members = cast("set[bytes]", await self.redis.smembers(self.keys.transactions))
        ids = sorted(i.decode() for i in members)
        pipe = self.redis.pipeline(transaction=False)
        for transactional_id in ids:
            pipe.hgetall(self.keys.transaction(transactional_id))
        found = []
        for transactional_id, raw in zip(ids, await pipe.execute(), strict=True):
            if raw:
                found.append(Transaction.from_fields(transactional_id, raw))
        return found

    async def listing(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_ms: int = -1,
        pattern: str | None = None,
    ) -> Listing:
        """ListTransactions: ids whose state, producer id, running time (longer than
        ``duration_ms``, if >= 0) and id (a regular expression, whole) match."""
        known = {str(s) for s in TxnState}
        wanted_states = set(states)
        unknown = sorted(wanted_states - known)
        pids = set(producer_ids)
        try:
            regex = re.compile(pattern) if pattern else None
        except re.error:
            return Listing([], unknown, INVALID_REGULAR_EXPRESSION)
        now = self.clock()
        found = [
            txn
            for txn in await self.all()
            if txn.state != TxnState.DEAD
            and (not pids or txn.producer_id in pids)
            and (not wanted_states or str(txn.state) in wanted_states)
            and (duration_ms < 0 or now - txn.start_ms > duration_ms)
            and (regex is None or regex.fullmatch(txn.transactional_id))
        ]
        return Listing(found, unknown)

    # -- the periodic work --------------------------------------------------------------
    async def tick(self, sweep: bool = False) -> None:
        """Abort transactions open longer than their timeout, fencing their producer
        (the epoch is bumped), and finish prepared ones; with ``sweep``, forget ids idle
        longer than transactional.id.expiration.ms."""
        now = self.clock()
        # Replies are bytes, and without scores the range is a list of members.
        due = cast(
            "list[bytes]", await self.redis.zrangebyscore(self.keys.transactions_due, "-inf", now)
        )
        for raw in due:
            transactional_id = raw.decode()
            try:
                async with self._locked(transactional_id):
                    await self._time_out(transactional_id)
            except LockError:
                continue  # busy: the next tick
        if sweep:
            for txn in await self.all():
                if txn.expired(self.clock(), self.config):
                    with contextlib.suppress(LockError):
                        async with self._locked(txn.transactional_id):
                            again = await self.load(txn.transactional_id)
                            if again is not None and again.expired(self.clock(), self.config):
                                log.info(
                                    "forgetting idle transactional id %r", txn.transactional_id
                                )
                                await self._drop(txn.transactional_id)

    async def _time_out(self, transactional_id: str) -> None:
        txn = await self.load(transactional_id)
        if txn is None:
            await self.redis.zrem(self.keys.transactions_due, transactional_id)
            return
        now = self.clock()
        if txn.state == TxnState.ONGOING and txn.start_ms + txn.timeout_ms <= now:
            log.info(
                "aborting transaction %r: open longer than its timeout (%d ms)",
                transactional_id,
                txn.timeout_ms,
            )
            txn.fence(now)
            await self._save(txn)
        await self._settle(txn)

    async def run_forever(self) -> None:
        """``tick`` every transaction.abort.timed.out.transaction.cleanup.interval.ms (at
        once at the start: a broker that died mid-commit left it prepared), sweeping the
        idle ids once an hour, as Kafka."""
        last_sweep = 0.0
        while True:
            try:
                sweep = time.monotonic() - last_sweep >= 3600 or not last_sweep
                await self.tick(sweep=sweep)
                if sweep:
                    last_sweep = time.monotonic()
            except REDIS_CONNECTION_ERRORS as exc:
                REDIS.failed(exc)
            except Exception:
                log.exception("transaction coordinator tick failed")
            else:
                REDIS.recovered()
            await asyncio.sleep(self.config.abort_interval_ms / 1000)
