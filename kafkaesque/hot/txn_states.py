"""Transactional ids' state in Redis: one hash per id, the id sets and the per-id lock.

This module owns how the transaction coordinator keeps a ``Transaction``
(kafkaesque/txn/transaction.py) in Redis: ``load`` and ``save`` (the hash, with the set of
every id and the sorted set of ids with something due, in one MULTI, or as supersets on
a Redis Cluster), ``drop`` of an id idle too long, ``all`` ids for ListTransactions and
the expiry sweep, the ids ``due`` for a timeout or a completion, and the short per-id
lock every transition runs under; and the transitions that need no lock
(``load_versioned``, then ``save_if`` or the ``saving`` of Log.end_transactions: a script
writes the state only if no broker holds the lock and nobody saved it since it was read,
by the ``version`` field every save bumps). The requests
(kafkaesque/txn/coordinator.py ``TransactionCoordinator``) and the completion of ended or
timed-out transactions (kafkaesque/txn/completion.py) share one ``TxnStates``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from redis.asyncio import Redis
from redis.exceptions import LockError, RedisError
from redis.typing import EncodableT, FieldT

from kafkaesque.errors import TransactionalIdBusy
from kafkaesque.hot.keys import Keys
from kafkaesque.hot.scripts import Scripts, shared_failure
from kafkaesque.txn.transaction import Transaction

if TYPE_CHECKING:
    from kafkaesque.hot.log import Log


# The fields compared besides the version (txn_state.lua's READ_AS, in its order).
READ_AS = ("producer_id", "producer_epoch", "state", "updated_ms", "partitions", "groups")


@dataclass(frozen=True, slots=True)
class StateWrite:
    """A transactional id's state to save by script if unchanged since it was read
    (txn_state.lua): its four keys, and what the state was read as (its version, and the
    fields every transition changes, for a state a broker without versions saved) and the
    id, the first arguments of txn_save.lua and txn_end.lua."""

    keys: list[str]
    read_as: list[Any]

    def fields(self, txn: Transaction) -> list[Any]:
        """The state's fields and values, as script arguments."""
        return [item for pair in txn.fields().items() for item in pair]


class TxnStates:
    """Load, save, drop and lock transactional ids' state."""

    def __init__(self, redis: Redis, keys: Keys, scripts: Scripts | None = None) -> None:
        self.redis = redis
        self.keys = keys
        # Transitions without the lock need the scripts, and every key in one slot: on a
        # Redis Cluster the id sets are elsewhere, so they all take the lock there.
        self.scripts = None if keys.cluster else scripts

    @classmethod
    def of(cls, log: Log) -> TxnStates:
        """The store on the log's client, keys and scripts."""
        return cls(log.redis, log.keys, log.scripts)

    async def load(self, transactional_id: str) -> Transaction | None:
        return (await self.load_versioned(transactional_id))[0]

    async def load_versioned(self, transactional_id: str) -> tuple[Transaction | None, int]:
        """The id's state (None: unknown) and its version (bumped by every save)."""
        key = self.keys.transaction(transactional_id)
        shared = self.scripts.shared if self.scripts is not None else None
        fields: dict[bytes, bytes]
        if shared is not None:  # the pipelined connection: a fraction of redis-py's work
            try:
                flat = await shared.execute("HGETALL", key)
            except RedisError as exc:
                raise shared_failure(exc) from exc
            # A map under RESP3, a flat list of fields and values under RESP2.
            fields = (
                flat if isinstance(flat, dict) else dict(zip(flat[::2], flat[1::2], strict=True))
            )
        else:
            fields = cast("dict[bytes, bytes]", await self.redis.hgetall(key))  # bytes
        if not fields:
            return None, 0
        return Transaction.from_fields(transactional_id, fields), int(fields.get(b"version", 0))

    @property
    def lock_free(self) -> bool:
        """Whether transitions may save without the lock (``save_if``, ``saving``)."""
        return self.scripts is not None

    def saving(self, read: Transaction, version: int) -> StateWrite:
        """What a script needs to save a state read as ``read`` at ``version`` (taken now:
        before the transition changes ``read``), unless it changed since."""
        tid = read.transactional_id
        keys = self.keys
        fields = read.fields()
        return StateWrite(
            [
                keys.transaction(tid),
                keys.transaction(tid, ":lock"),
                keys.transactions,
                keys.transactions_due,
            ],
            [version, *(fields[name] for name in READ_AS), tid],
        )

    async def save_if(self, txn: Transaction, write: StateWrite) -> bool:
        """Save ``txn`` unless a broker holds the id's lock or the state changed since it
        was read (``write``, from ``saving``); False then, and nothing written."""
        assert self.scripts is not None, "lock_free is false"
        deadline = txn.deadline_ms()
        args = [*write.read_as, "" if deadline is None else deadline, *write.fields(txn)]
        reply = await self.scripts.txn_save(keys=write.keys, args=args)
        return reply == b"ok"

    async def stage_if(
        self, write: StateWrite, key: str, values: Mapping[FieldT, EncodableT]
    ) -> bool:
        """Write ``values`` into the hash ``key`` (a group's offsets held pending) unless a
        broker holds the id's lock or its state changed since it was read (``write``);
        False then, and nothing written (txn_stage.lua)."""
        assert self.scripts is not None, "lock_free is false"
        args = [*write.read_as[:-1], *(item for pair in values.items() for item in pair)]
        reply = await self.scripts.txn_stage(keys=[*write.keys[:2], key], args=args)
        return reply == b"ok"

    async def save(self, txn: Transaction) -> None:
        """The state and the id sets in one MULTI; on a Redis Cluster, where the state's
        slot is the id's own, the sets are kept supersets instead (added to before the
        state is written, removed from after): a reader meets at worst an id with
        nothing due, which it skips, never misses one."""
        tid = txn.transactional_id
        deadline = txn.deadline_ms()
        # (its str keys are valid fields: redis-py's key type is invariant)
        fields = cast("dict[FieldT, EncodableT]", txn.fields())
        if self.keys.cluster:
            index = self.redis.pipeline(transaction=False)
            index.sadd(self.keys.transactions, tid)
            if deadline is not None:
                index.zadd(self.keys.transactions_due, {tid: deadline})
            await index.execute()
            # No version kept: a cluster's transitions all take the lock (lock_free).
            await self.redis.hset(self.keys.transaction(tid), mapping=fields)
            if deadline is None:
                await self.redis.zrem(self.keys.transactions_due, tid)
            return
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.keys.transaction(tid), mapping=fields)
        # Transitions without the lock (save_if, Log.end_transactions) compare it.
        pipe.hincrby(self.keys.transaction(tid), "version", 1)
        pipe.sadd(self.keys.transactions, tid)
        if deadline is None:
            pipe.zrem(self.keys.transactions_due, tid)
        else:
            pipe.zadd(self.keys.transactions_due, {tid: deadline})
        await pipe.execute()

    async def drop(self, transactional_id: str) -> None:
        pipe = self.redis.pipeline(transaction=not self.keys.cluster)  # see save
        pipe.delete(self.keys.transaction(transactional_id))
        pipe.srem(self.keys.transactions, transactional_id)
        pipe.zrem(self.keys.transactions_due, transactional_id)
        await pipe.execute()

    @contextlib.asynccontextmanager
    async def locked(self, transactional_id: str) -> AsyncIterator[None]:
        """The id's lock for one read-modify-write (markers included); its timeout frees
        it if a process dies holding it. Raises TransactionalIdBusy if it cannot be had in
        time, or was lost before its release (the block's own lock errors alike)."""
        lock = self.redis.lock(
            self.keys.transaction(transactional_id, ":lock"), timeout=15, blocking_timeout=15
        )
        try:
            async with lock:
                yield
        except LockError as exc:
            raise TransactionalIdBusy(f"transactional id {transactional_id!r} is busy") from exc

    async def due(self, now_ms: int) -> list[str]:
        """The ids with a timeout or a completion due by ``now_ms``."""
        # Replies are bytes, and without scores the range is a list of members.
        due = await self.redis.zrangebyscore(self.keys.transactions_due, "-inf", now_ms)
        return [raw.decode() for raw in cast("list[bytes]", due)]

    async def not_due(self, transactional_id: str) -> None:
        """Take an id off the due set (its state is gone)."""
        await self.redis.zrem(self.keys.transactions_due, transactional_id)

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
