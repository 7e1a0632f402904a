"""Multi-partition operations in steps (the cluster layout, kafkaesque/hot/log_steps.py), here
on one server: the layout works there too, and each step can be stopped half-way."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import TopicExists, UnknownTopic
from kafkaesque.hot.log import Log
from kafkaesque.hot.log_types import RestoredPartition, RestoredTopic
from kafkaesque.hot.sequence import clock, counter_of, record_id
from kafkaesque.hot.slots import slot_of
from kafkaesque.records.build import build_batch


class Crash(Exception):
    """A broker dying between an operation's catalog step and its partitions."""


def cluster_log(make_log: Callable[[], Log]) -> Log:
    return Log(make_log().redis, cluster=True)


def crash_after(part: object, method: str, calls: int = 0) -> None:
    """Make ``part``'s ``method`` (a per-partition step: Log.steps') die after ``calls``
    calls."""
    original = getattr(part, method)
    done = 0

    async def dying(*args, **kwargs):
        nonlocal done
        if done >= calls:
            raise Crash
        done += 1
        return await original(*args, **kwargs)

    setattr(part, method, dying)


async def metas(log: Log, topic: str, partitions: int) -> list[dict[bytes, bytes]]:
    return [await log.redis.hgetall(log.keys.partition(topic, p).meta) for p in range(partitions)]


def test_create_in_steps_and_the_sweep(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = cluster_log(make_log)
        await log.ensure_recovered()
        await log.create_topic(TopicConfig("ok", 3, page_size=2))
        assert all(m[b"topic_id"] for m in await metas(log, "ok", 3))
        assert await log.redis.zcard(log.keys.steps) == 0
        with pytest.raises(TopicExists):
            await log.create_topic(TopicConfig("ok", 1))
        crash_after(log.steps, "_create_partitions")
        with pytest.raises(Crash):
            await log.create_topic(TopicConfig("half", 3, page_size=2))
        fresh = Log(log.redis, cluster=True)
        assert "half" in await fresh.list_topics()
        with pytest.raises(UnknownTopic):  # listed, its partitions not there yet
            await fresh.state("half", 0)
        assert await fresh.finish_steps() == []  # too young: its creator may be at it
        assert await fresh.finish_steps(older_than_ms=0) == [fresh.keys.creating("half")]
        assert [m[b"end"] for m in await metas(fresh, "half", 3)] == [b"0"] * 3
        assert (await fresh.append("half", 2, [build_batch([b"a"])])).base_offsets == [0]
        assert await fresh.redis.zcard(fresh.keys.steps) == 0
        assert not await fresh.redis.exists(fresh.keys.creating("half"))

    asyncio.run(scenario())


def test_configure_in_steps_and_the_sweep(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = cluster_log(make_log)
        await log.ensure_recovered()
        await log.create_topic(TopicConfig("c", 2, page_size=2))
        await log.configure_topic("c", lambda c: c.replace(configs={"retention.ms": "60000"}))
        assert {m[b"ttl"] for m in await metas(log, "c", 2)} == {b"60"}
        assert {m[b"config_version"] for m in await metas(log, "c", 2)} == {b"1"}
        crash_after(log.steps, "_apply_config")
        with pytest.raises(Crash):
            await log.add_partitions("c", 4)
        assert (await log.topic("c")).partitions == 4
        assert [bool(m) for m in await metas(log, "c", 4)] == [True, True, False, False]
        fresh = Log(log.redis, cluster=True)
        assert await fresh.finish_steps(older_than_ms=0) == [fresh.keys.configuring("c")]
        found = await metas(fresh, "c", 4)
        assert [m[b"config_version"] for m in found] == [b"2"] * 4
        assert {m[b"ttl"] for m in found} == {b"60"}
        # An older version never overwrites a newer one.
        part = fresh.keys.partition("c", 0)
        topic_id = (await fresh.topic("c")).topic_id.hex()
        assert (
            await fresh.scripts.configure_partition(keys=[part.meta], args=["ttl 1", 1, topic_id])
            == 0
        )
        assert await fresh.redis.hget(part.meta, "ttl") == b"60"

    asyncio.run(scenario())


def test_delete_in_steps_and_the_sweep(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = cluster_log(make_log)
        await log.ensure_recovered()
        await log.create_topic(TopicConfig("d", 2, page_size=2))
        await log.append("d", 1, [build_batch([b"a", b"b", b"c"])])
        crash_after(log.steps, "_delete_partitions")
        with pytest.raises(Crash):
            await log.delete_topic("d")
        fresh = Log(log.redis, cluster=True)
        assert "d" not in await fresh.list_topics()
        with pytest.raises(UnknownTopic):
            await fresh.topic("d")
        # Created again while its deletion is unfinished: refused, as Kafka refuses a topic
        # marked for deletion.
        with pytest.raises(TopicExists):
            await fresh.create_topic(TopicConfig("d", 1))
        assert await fresh.finish_steps(older_than_ms=0) == [fresh.keys.deleting("d")]
        left = [k async for k in fresh.redis.scan_iter(match="ks:{d:*")]
        assert left == []
        await fresh.create_topic(TopicConfig("d", 1))
        # A late partition step of the old topic leaves the new one alone.
        old = fresh.keys.partition("d", 0)
        args = [old.prefix, "00" * 16]
        assert (
            await fresh.scripts.delete_partition(
                keys=[old.meta, old.index, old.stats, old.producers], args=args
            )
            == 0
        )
        assert (await fresh.state("d", 0)).log_end == 0

    asyncio.run(scenario())


def test_enable_archiving_in_steps(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = cluster_log(make_log)
        await log.ensure_recovered()
        await log.create_topic(TopicConfig("a", 3, page_size=2, ttl=3600))
        for p in range(3):
            await log.append("a", p, [build_batch([b"x", b"y"]), build_batch([b"z"])])
        assert 0 < await log.redis.ttl(log.keys.partition("a", 2).page(0)) <= 3600
        crash_after(log.scripts, "archive_on", calls=1)
        with pytest.raises(Crash):
            await log.enable_archiving()
        # Half-way: a topic created now already gets the field; the next call redoes all.
        await log.create_topic(TopicConfig("b", 1))
        assert (await metas(log, "b", 1))[0][b"archiving"] == b"1"
        fresh = Log(log.redis, cluster=True)
        await fresh.enable_archiving()
        assert [m[b"archiving"] for m in await metas(fresh, "a", 3)] == [b"1"] * 3
        assert await fresh.redis.ttl(fresh.keys.partition("a", 2).page(0)) == -1
        assert await fresh.redis.get(fresh.keys.archiving) == b"3"

    asyncio.run(scenario())


def test_restore_in_steps(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = cluster_log(make_log)
        ahead = clock(2_000_000_000_000)  # ids the archive has seen, from a later clock
        config = TopicConfig("r", 2)
        parts = [RestoredPartition(10, 0), RestoredPartition(5, 2, log_start=3)]
        await log.restore([RestoredTopic(config, parts)], record_id(ahead, 7), 0)
        assert await log.list_topics() == ["r"]
        assert [(await log.state("r", p)).log_end for p in range(2)] == [10, 5]
        appended = await log.append("r", 1, [build_batch([b"a"])])
        assert appended.base_offsets == [5]
        assert counter_of(await log.sequence_at("r", 1, 5)) == ahead + 1
        slot_hash = log.keys.slot_hash(slot_of("r", 0))
        assert int(await log.redis.hget(slot_hash, "seq")) >= ahead
        assert int(await log.redis.get(log.keys.sequence_floor)) == ahead
        assert await log.redis.get(log.keys.archiving) == b"3"

    asyncio.run(scenario())


def test_lost_data_waits_for_recovery(make_log: Callable[[], Log]) -> None:
    """The catalog lost its data (a flush of every node): an append recovers first; a
    partition that does not exist is unknown, not a loss."""

    async def scenario() -> None:
        log = cluster_log(make_log)
        await log.create_topic(TopicConfig("lost", 2, page_size=2))
        await log.append("lost", 0, [build_batch([b"a", b"b", b"c"])])
        with pytest.raises(UnknownTopic):
            await log.append("lost", 2, [build_batch([b"a"])])
        config = await log.topic("lost")
        await log.redis.flushall()
        calls = []

        async def recover(restoring: Log) -> None:
            calls.append(1)
            parts = [RestoredPartition(3, 0), RestoredPartition(0, 0)]
            await restoring.restore([RestoredTopic(config, parts)], 0, 1000)

        log.recover = recover
        assert (await log.append("lost", 0, [build_batch([b"d"])])).base_offsets == [3]
        assert calls == [1]
        assert (await log.state("lost", 0)).leader_epoch == 1
        assert await log.new_producer_id() > 1000

    asyncio.run(scenario())
