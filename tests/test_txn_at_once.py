"""The coordinator's transitions without the id's lock, on fakeredis and a real Redis:
EndTxn's markers and state in one script (txn_end.lua), AddPartitionsToTxn's compare-and-
save (txn_save.lua). Each writes only if no broker holds the lock and nobody saved the
state since it was read; otherwise nothing, and the coordinator takes the lock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import Code, TransactionNotOpen, UnknownTopic
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import Partitions
from kafkaesque.records.build import build_batch
from kafkaesque.txn.completion import DROPPED_MARKER_ERRORS
from kafkaesque.txn.coordinator import TransactionCoordinator
from kafkaesque.txn.transaction import TxnState


def txn_batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    return build_batch(
        [value], producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True
    )


async def open_transaction(make_log: Callable[[], Log]) -> tuple:
    """A coordinator on a topic "a" of 2 partitions, and id "t" with a record in its open
    transaction on each: (log, partitions, coordinator, producer id, epoch)."""
    log = make_log()
    await log.ensure_recovered()
    await log.create_topic(TopicConfig("a", 2))
    parts = Partitions(log)
    c = TransactionCoordinator(log, parts, GroupCoordinator(log))
    assert c.states.lock_free
    init = await c.init_producer("t", 60_000)
    pid, epoch = init.producer_id, init.producer_epoch
    assert await c.add_partitions("t", pid, epoch, [("a", 0), ("a", 1)]) == {
        ("a", 0): Code.NONE,
        ("a", 1): Code.NONE,
    }
    _, serial = await c.verify_for_append("t", pid, epoch, [("a", 0), ("a", 1)])
    for partition in (0, 1):
        await parts.append("a", partition, [txn_batch(pid, epoch, 0, b"x")], transaction=serial)
    return log, parts, c, pid, epoch


def test_end_in_one_call_refused_while_locked_or_changed(make_log) -> None:
    """With the lock held by another broker, or a save since the state was read, the
    script writes nothing: no marker, the state as it was."""

    async def scenario() -> None:
        log, parts, c, pid, epoch = await open_transaction(make_log)
        txn, version = await c.states.load_versioned("t")
        state = c.states.saving(txn, version)
        assert txn.end(pid, epoch, True, now=1) == Code.NONE
        ends = await log.log_ends("a", [0, 1])
        lock = log.keys.transaction("t", ":lock")
        await log.redis.set(lock, "another broker")
        assert await parts.end_transactions(txn, state, DROPPED_MARKER_ERRORS) == ("busy", {})
        await log.redis.delete(lock)
        await c.states.save(await c.states.load("t"))  # another broker saved it
        assert await parts.end_transactions(txn, state, DROPPED_MARKER_ERRORS) == ("changed", {})
        assert await log.log_ends("a", [0, 1]) == ends
        assert (await c.states.load("t")).state == TxnState.ONGOING
        assert await log.last_stable_offsets("a", [0, 1]) == [0, 0]
        # Read again, it goes through: a marker each, the transaction complete.
        assert await c.end("t", pid, epoch, True) == Code.NONE
        assert await log.log_ends("a", [0, 1]) == [e + 1 for e in ends]
        assert await log.last_stable_offsets("a", [0, 1]) == [e + 1 for e in ends]
        assert (await c.states.load("t")).state == TxnState.COMPLETE_COMMIT
        assert await c.end("t", pid, epoch, True) == Code.NONE  # a retry: nothing more
        assert await log.log_ends("a", [0, 1]) == [e + 1 for e in ends]

    asyncio.run(scenario())


def test_end_in_one_call_drops_a_deleted_topic_and_keeps_a_failure_prepared(make_log) -> None:
    """A partition of a deleted topic drops its marker and the transaction completes; a
    partition that cannot take one now (Redis lost its data) leaves it prepared, with the
    markers written so far, for the coordinator's tick to finish."""

    async def scenario() -> None:
        log, parts, c, pid, epoch = await open_transaction(make_log)
        await log.create_topic(TopicConfig("gone", 1))
        await c.add_partitions("t", pid, epoch, [("gone", 0)])
        await log.delete_topic("gone")
        assert await c.end("t", pid, epoch, False) == Code.NONE
        assert (await c.states.load("t")).state == TxnState.COMPLETE_ABORT
        assert [entry[0] for entry in await log.aborted_transactions("a", 0)] == [pid]

        await c.add_partitions("t", pid, epoch, [("a", 0)])
        txn, version = await c.states.load_versioned("t")
        state = c.states.saving(txn, version)
        assert txn.end(pid, epoch, True, now=1) == Code.NONE
        await log.redis.delete(log.keys.incarnation)  # as if Redis had lost its data
        status, results = await parts.end_transactions(txn, state, DROPPED_MARKER_ERRORS)
        assert status == "prepared" and results[("a", 0)] is not None
        assert not isinstance(results[("a", 0)], UnknownTopic)
        assert (await c.states.load("t")).state == TxnState.PREPARE_COMMIT
        await log.ensure_recovered()
        await c.completion.tick()
        assert (await c.states.load("t")).state == TxnState.COMPLETE_COMMIT

    asyncio.run(scenario())


def test_add_partitions_saves_only_what_it_read(make_log) -> None:
    """AddPartitionsToTxn's save is refused when the state changed since it was read or
    the lock is held; the coordinator then adds under the lock, on the new state."""

    async def scenario() -> None:
        log, parts, c, pid, epoch = await open_transaction(make_log)
        txn, version = await c.states.load_versioned("t")
        state = c.states.saving(txn, version)
        assert txn.add(pid, epoch, 5, partitions={("a", 0), ("b", 0)}) == Code.NONE
        await c.states.save(await c.states.load("t"))  # another broker saved it
        assert not await c.states.save_if(txn, state)
        lock = log.keys.transaction("t", ":lock")
        txn, version = await c.states.load_versioned("t")
        await log.redis.set(lock, "another broker")
        assert not await c.states.save_if(txn, c.states.saving(txn, version))
        await log.redis.delete(lock)
        # A broker that keeps no version (an older one) saved it: still seen as changed.
        txn, version = await c.states.load_versioned("t")
        state = c.states.saving(txn, version)
        older = await c.states.load("t")
        older.updated_ms += 1
        await log.redis.hset(log.keys.transaction("t"), mapping=older.fields())
        assert txn.add(pid, epoch, 6, partitions={("a", 0), ("b", 0)}) == Code.NONE
        assert not await c.states.save_if(txn, state)
        assert (await c.states.load("t")).partitions == {("a", 0), ("a", 1)}
        assert await c.add_partitions("t", pid, epoch, [("a", 0), ("b", 0)]) == {
            ("a", 0): Code.OPERATION_NOT_ATTEMPTED,
            ("b", 0): Code.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert await c.end("t", pid, epoch, False) == Code.NONE
        # A late batch of the ended transaction is still refused (append.lua's serial).
        ends = await log.log_ends("a", [0])
        with pytest.raises(TransactionNotOpen):
            await parts.append("a", 0, [txn_batch(pid, epoch, 1, b"late")], transaction=txn.serial)
        assert await log.log_ends("a", [0]) == ends

    asyncio.run(scenario())


def test_offsets_held_only_while_the_transaction_is_as_read(make_log) -> None:
    """TxnOffsetCommit without the lock (txn_stage.lua): refused while the lock is held or
    once the state changed, nothing held; held, the transaction's commit settles them."""

    async def scenario() -> None:
        log, _, c, pid, epoch = await open_transaction(make_log)
        assert await c.add_offsets("t", pid, epoch, "g") == Code.NONE
        txn, version = await c.states.load_versioned("t")
        state = c.states.saving(txn, version)
        key, values = c.staged.staging("g", "t", {("a", 0): (5, "m", -1)})
        lock = log.keys.transaction("t", ":lock")
        await log.redis.set(lock, "another broker")
        assert not await c.states.stage_if(state, key, values)
        await log.redis.delete(lock)
        await c.states.save(await c.states.load("t"))  # another broker saved it
        assert not await c.states.stage_if(state, key, values)
        assert await c.pending_offsets("g") == set()  # nothing held
        codes = await c.commit_offsets("t", "g", pid, epoch, {("a", 0): (5, "m", -1)})
        assert codes == {("a", 0): Code.NONE}
        assert await c.pending_offsets("g") == {("a", 0)}
        assert await c.end("t", pid, epoch, True) == Code.NONE
        assert (await c.groups.admin.offsets.read("g"))[("a", 0)].offset == 5
        assert await c.pending_offsets("g") == set()
        # The transaction ended: offsets for it are refused, not held.
        codes = await c.commit_offsets("t", "g", pid, epoch, {("a", 1): (9, None, -1)})
        assert codes == {("a", 1): Code.INVALID_TXN_STATE}
        assert await c.pending_offsets("g") == set()

    asyncio.run(scenario())
