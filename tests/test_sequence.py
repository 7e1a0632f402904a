"""Record ids on a cluster (kafkaesque/hot/sequence.py) and the append script's two modes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.log import Log
from kafkaesque.hot.sequence import (
    EPOCH_MS,
    MAX_COUNTER,
    SLOT_BITS,
    Ids,
    clock,
    counter_of,
    record_id,
    slot_of,
)
from kafkaesque.hot.slots import SLOTS
from kafkaesque.hot.slots import slot_of as partition_slot
from kafkaesque.records.build import build_batch


def test_record_id_at_the_bounds() -> None:
    for counter in (0, 1, 255, MAX_COUNTER):
        for slot in (0, 1, SLOTS - 1):
            rid = record_id(counter, slot)
            assert (counter_of(rid), slot_of(rid)) == (counter, slot)
            assert 0 <= rid < 1 << 63  # a PostgreSQL bigint
    assert record_id(MAX_COUNTER, SLOTS - 1) == (1 << 63) - 1
    assert record_id(1, 0) == 1 << SLOT_BITS
    # Ids of one slot grow with the counter; of one counter value, with the slot.
    assert record_id(5, SLOTS - 1) < record_id(6, 0)
    for counter, slot in ((MAX_COUNTER + 1, 0), (-1, 0), (0, SLOTS), (0, -1)):
        with pytest.raises(ValueError):
            record_id(counter, slot)


def test_clock() -> None:
    assert clock(EPOCH_MS) == 0
    assert clock(EPOCH_MS + 1) == 256
    # Below 2^49 until 2094; Lua's doubles hold every counter value exactly (2^53).
    year_2094 = 3_912_710_400_000
    assert clock(year_2094) < MAX_COUNTER < 2**53
    now = clock(int(time.time() * 1000))
    assert 2**40 < now and record_id(now, 0) > 2**54


def test_ids() -> None:
    assert (Ids(None).id(7), Ids(None).step) == (7, 1)
    assert (Ids(3).id(7), Ids(3).step) == (record_id(7, 3), 1 << SLOT_BITS)


def test_one_redis_keeps_one_counter(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 2, page_size=2))
        for i in range(3):
            await log.append("t", i % 2, [build_batch([b"a", b"b"])])
        assert await log.sequence_counter() == 6
        assert log.highest_sequence == 6
        pages = await log.closed_pages("t", 0, 0)
        assert [(p.sequences, p.id_step) for p in pages] == [([1], 1), ([5], 1)]
        assert await log.sequence_at("t", 0, 3) == 6

    asyncio.run(scenario())


def test_cluster_mode_ids_follow_the_slot_clock(make_log: Callable[[], Log]) -> None:
    """The cluster layout on one server (hash tags change nothing there): each slot's
    counter starts at the clock, ids carry the slot, one Log's appends get growing ids."""

    async def scenario() -> None:
        single = make_log()
        log = Log(single.redis, cluster=True)
        await log.ensure_recovered()
        await log.create_topic(TopicConfig("t", 2, page_size=2))
        before = clock(int(time.time() * 1000))
        ids = []
        for i in range(6):
            await log.append("t", i % 2, [build_batch([b"a", b"b"])])
            ids.append(await log.sequence_at("t", i % 2, 2 * (i // 2) + 1))
        assert ids == sorted(ids)
        for i, rid in enumerate(ids):
            assert slot_of(rid) == partition_slot("t", i % 2)
            assert counter_of(rid) >= before
        p = await log.closed_pages("t", 0, 0)
        assert p[0].id_step == 1 << SLOT_BITS
        assert p[0].sequences[0] + p[0].id_step == await log.sequence_at("t", 0, 1)
        # The slot's counter is its hash's `seq`; the single-Redis counter is untouched.
        slot_hash = log.keys.slot_hash(partition_slot("t", 0))
        seq = int(await log.redis.hget(slot_hash, "seq"))
        assert seq == counter_of(await log.sequence_at("t", 0, 5))
        assert not await log.redis.exists("ks:gseq")
        # A counter ahead of the clock goes on from itself.
        ahead = clock(int(time.time() * 1000)) + 10**9
        await log.redis.hset(slot_hash, "seq", ahead)
        await log.append("t", 0, [build_batch([b"c"])])
        assert counter_of(await log.sequence_at("t", 0, 6)) == ahead + 1
        assert log.highest_sequence == ahead + 1
        # The next append through this Log goes above that, whatever its slot's counter.
        await log.append("t", 1, [build_batch([b"c"])])
        assert counter_of(await log.sequence_at("t", 1, 6)) == ahead + 2

    asyncio.run(scenario())
