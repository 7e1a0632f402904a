"""Transactional ids' state in Redis: one hash per id, the id sets and the per-id lock.

This module owns how the transaction coordinator keeps a ``Transaction``
(kafkaesque/txn/transaction.py) in Redis: ``load`` and ``save`` (the hash, with the set of
every id and the sorted set of ids with something due, in one MULTI, or as supersets on
a Redis Cluster), ``drop`` of an id idle too long, ``all`` ids for ListTransactions and
the expiry sweep, the ids ``due`` for a timeout or a completion, and the short per-id
lock every transition runs under. The requests
(kafkaesque/txn/coordinator.py ``TransactionCoordinator``) and the completion of ended or
timed-out transactions (kafkaesque/txn/completion.py) share one ``TxnStates``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, cast

from redis.asyncio import Redis
from redis.exceptions import LockError
from redis.typing import EncodableT, FieldT

from kafkaesque.errors import TransactionalIdBusy
from kafkaesque.hot.keys import Keys
from kafkaesque.txn.transaction import Transaction

if TYPE_CHECKING:
    from kafkaesque.hot.log import Log


class TxnStates:
    """Load, save, drop and lock transactional ids' state."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    @classmethod
    def of(cls, log: Log) -> TxnStates:
        """The store on the log's client and keys."""
        return cls(log.redis, log.keys)

    async def load(self, transactional_id: str) -> Transaction | None:
        raw = await self.redis.hgetall(self.keys.transaction(transactional_id))
        fields = cast("dict[bytes, bytes]", raw)  # replies are bytes
        return Transaction.from_fields(transactional_id, fields) if fields else None

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
            await self.redis.hset(self.keys.transaction(tid), mapping=fields)
            if deadline is None:
                await self.redis.zrem(self.keys.transactions_due, tid)
            return
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.keys.transaction(tid), mapping=fields)
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
