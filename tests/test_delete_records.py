"""DeleteRecords in Redis alone (no archive): the floor, freed pages, and every read path
honouring the new log start; on fakeredis and on a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import OffsetOutOfRange, PolicyViolation, UnknownTopic
from kafkaesque.hot.log import HIGH_WATERMARK, Log
from kafkaesque.hot.log_types import RestoredPartition, RestoredTopic
from kafkaesque.partition.layer import EARLIEST, Partitions
from kafkaesque.records.build import build_batch
from tests.test_log import batch, read_all, words


async def fifty_records(log: Log, topic: str = "d") -> None:
    """Offsets 0..49 in batches of 5, pages of 10: pages 0..4 closed, page 5 open, empty."""
    await log.create_topic(TopicConfig(topic, 2, page_size=10))
    for i in range(0, 50, 5):
        await log.append(topic, 0, [batch(words(i, 5))])


async def page_keys(log: Log, topic: str = "d") -> list[bytes]:
    return sorted(await log.redis.keys(f"ks:{{{topic}:0}}:page:*"))


def test_delete_moves_the_log_start_and_frees_whole_pages(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await fifty_records(log)
        assert await log.delete_records("d", 0, 25) == 25
        state = await log.state("d", 0)
        assert (state.log_start, state.log_end, state.floor) == (25, 50, 25)
        # Pages 0 and 1 ([0, 20)) are gone with their batch index; page 2 holds 25.
        assert await page_keys(log) == [b"ks:{d:0}:page:%d" % n for n in (2, 3, 4)]
        assert not await log.redis.exists("ks:{d:0}:bidx:0", "ks:{d:0}:bidx:1")
        assert await log.redis.zrange("ks:{d:0}:index", 0, -1) == [b"2", b"3", b"4"]
        below = await log.read("d", 0, 24)
        assert below.below_start and below.log_start == 25 and not below.batches
        assert await read_all(log, "d", offset=25) == list(enumerate(words(25, 25), 25))
        assert (await Partitions(log).list_offset("d", 0, EARLIEST)).offset == 25
        # The other partition is untouched.
        assert (await log.state("d", 1)).floor == 0

    asyncio.run(scenario())


def test_the_log_start_never_moves_back(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await fifty_records(log)
        await log.delete_records("d", 0, 30)
        assert await log.delete_records("d", 0, 10) == 30  # a no-op, answering the start
        assert await log.delete_records("d", 0, 30) == 30
        state = await log.state("d", 0)
        assert (state.log_start, state.floor) == (30, 30)
        assert (await log.read("d", 0, 29)).below_start

    asyncio.run(scenario())


def test_offsets_past_the_end_and_negative_ones_are_refused(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await fifty_records(log)
        for bad in (51, 1 << 40, -2, -100):
            with pytest.raises(OffsetOutOfRange):
                await log.delete_records("d", 0, bad)
        state = await log.state("d", 0)
        assert (state.log_start, state.floor, state.pages) == (0, 0, 5)
        with pytest.raises(UnknownTopic):
            await log.delete_records("nope", 0, 0)
        with pytest.raises(UnknownTopic):
            await log.delete_records("d", 2, 0)
        with pytest.raises(UnknownTopic):
            await log.delete_records("d", -1, 0)

    asyncio.run(scenario())


def test_up_to_the_end_frees_the_open_page_and_appends_go_on(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await fifty_records(log)
        await log.append("d", 0, [batch(words(50, 3))])  # the open page holds 50..52
        assert await log.delete_records("d", 0, HIGH_WATERMARK) == 53
        state = await log.state("d", 0)
        assert (state.log_start, state.log_end, state.pages, state.records) == (53, 53, 0, 0)
        assert await page_keys(log) == []
        assert (await log.read("d", 0, 52)).below_start
        appended = await log.append("d", 0, [batch(words(53, 4))])
        assert (appended.base_offsets, appended.log_start) == ([53], 53)
        assert await read_all(log, "d", offset=53) == list(enumerate(words(53, 4), 53))
        assert (await log.state("d", 0)).pages == 1

    asyncio.run(scenario())


def test_a_time_lookup_never_answers_a_deleted_offset(make_log: Callable[[], Log]) -> None:
    """A batch across the log start: its latest record lies below it, so the lookup goes on
    to the next batch."""

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("tm", 1))
        await log.append("tm", 0, [build_batch(words(0, 5), timestamps=[100, 900, 100, 100, 100])])
        await log.append("tm", 0, [build_batch(words(5, 2), timestamps=[600, 700])])
        assert await log.offset_for_timestamp("tm", 0, 500) == (1, 900)
        await log.delete_records("tm", 0, 2)
        assert await log.offset_for_timestamp("tm", 0, 500) == (5, 600)
        assert await log.offset_for_timestamp("tm", 0, 50) == (2, 100)
        assert await log.offset_for_timestamp("tm", 0, 800) is None

    asyncio.run(scenario())


def test_a_compacted_topic_refuses(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("cp", 1, configs={"cleanup.policy": "compact"}))
        await log.append("cp", 0, [batch(words(0, 3))])
        with pytest.raises(PolicyViolation):
            await log.delete_records("cp", 0, 2)
        assert (await log.state("cp", 0)).floor == 0
        await log.create_topic(TopicConfig("both", 1, configs={"cleanup.policy": "compact,delete"}))
        await log.append("both", 0, [batch(words(0, 3))])
        assert await log.delete_records("both", 0, 2) == 2

    asyncio.run(scenario())


def test_a_restore_keeps_the_floor(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        config = TopicConfig("rs", 2)
        partitions = [RestoredPartition(100, 0, 60), RestoredPartition(80, 0)]
        await log.restore([RestoredTopic(config, partitions)], 0, 0)
        assert [(await log.state("rs", p)).floor for p in (0, 1)] == [60, 0]
        # A partition Redis still has keeps its data and takes the archive's floor.
        await log.append("rs", 1, [batch(words(0, 5))])
        partitions = [RestoredPartition(100, 0, 60), RestoredPartition(80, 0, 82)]
        await log.restore([RestoredTopic(config, partitions)], 0, 0)
        state = await log.state("rs", 1)
        assert (state.log_start, state.log_end, state.floor) == (82, 85, 82)
        assert (await log.read("rs", 1, 81)).below_start

    asyncio.run(scenario())
