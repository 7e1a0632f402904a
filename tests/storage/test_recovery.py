"""Recovery: Redis loses everything (FLUSHALL); the archive gives back topics and offsets."""

from __future__ import annotations

import asyncio

import redis.asyncio

from kafkaesque.clock import now_ms
from kafkaesque.config.topic_config import TopicConfig
from storage_pg import Archiver, ArchiveReader, create_pool, recover
from storage_pg.cold import status
from storage_pg.recovery import restore_epoch_floor, restored_topics
from tests.storage.common import archived_rows, make_log, produce


def test_recovery_after_flushall(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        log = make_log(redis_url)
        configs = [
            TopicConfig("a", 2, page_size=4, ttl=3600, max_pages=5),
            TopicConfig("b", 1, page_size=3, replication_factor=3),  # restored too
            TopicConfig("never-archived", 1),
        ]
        await log.enable_archiving()
        for c in configs[:2]:
            await log.create_topic(c)
        rows = await produce(log, "a", 0, [b"x"] * 6)
        rows += await produce(log, "b", 0, [b"y"] * 4, producer=(log_pid := 41, 0, 0))
        rows += await produce(log, "a", 1, [b"z"] * 2)
        await log.redis.set(f"{log.ns}:cluster_id", "cluster-1")
        await Archiver(log, pool, idle_close_ms=0).run_once()
        # not archived: lost with Redis
        await produce(log, "a", 0, [b"lost"] * 3)
        await log.create_topic(configs[2])
        epochs_before = {
            (t, p): (await log.state(t, p)).leader_epoch for t, p in [("a", 0), ("b", 0)]
        }
        assert await log.new_producer_id() >= 1

        floor = restore_epoch_floor(now_ms())
        await log.redis.flushall()
        assert await log.needs_recovery()
        assert await recover(log, pool)
        assert not await log.needs_recovery()
        assert not await recover(log, pool)  # once only

        assert await log.list_topics() == ["a", "b"]
        for c in configs[:2]:
            assert await log.topic(c.name) == c  # same config, same topic id
        ends = {("a", 0): 6, ("a", 1): 2, ("b", 0): 4}
        for (t, p), end in ends.items():
            state = await log.state(t, p)
            assert (state.log_start, state.log_end) == (end, end)
            assert state.leader_epoch > max(epochs_before.get((t, p), 0), floor)
        assert await log.sequence_counter() >= rows[-1].id
        assert await log.new_producer_id() > log_pid
        assert await log.redis.get(f"{log.ns}:cluster_id") == b"cluster-1"
        # the archive knows the bumped epochs, so a second loss bumps past them
        async with pool.acquire() as conn:
            epochs = {(r[0], r[1]): r[2] for r in await conn.fetch("SELECT * FROM partition_state")}
        assert epochs == {tp: (await log.state(*tp)).leader_epoch for tp in ends}

        # appends continue after the archived offsets, with fresh ids
        new = await produce(log, "a", 0, [b"new"] * 5)
        assert new[0].offset == 6 and new[0].id > rows[-1].id
        summary = await Archiver(log, pool, idle_close_ms=0).run_once()
        assert summary.rows == 5 and summary.problems == []
        assert await archived_rows(pg_dsn) == rows + new

        # the archived records stay readable through the cold store
        cold = make_log(redis_url, cold=ArchiveReader(pool))
        result = await cold.read("a", 0, 0)
        assert result.batches and result.log_start == 0

        # a second loss: epochs go up again
        first = (await log.state("a", 0)).leader_epoch
        await log.redis.flushall()
        await recover(log, pool)
        assert (await log.state("a", 0)).leader_epoch > first
        assert (await log.state("a", 0)).log_end == 11
        await pool.close()

    asyncio.run(scenario())


def test_recovery_through_the_log_callback(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        log = make_log(redis_url, recover=lambda log: recover(log, pool))
        await log.create_topic(TopicConfig("t", 1, page_size=2))
        await produce(log, "t", 0, [b"1", b"2", b"3", b"4"])
        await Archiver(log, pool, idle_close_ms=0).run_once()
        await redis.asyncio.Redis.from_url(redis_url).flushall()
        # the first append after the loss restores first, then lands after the archive
        more = await produce(log, "t", 0, [b"5"])
        assert more[0].offset == 4 and more[0].id == 5
        await pool.close()

    asyncio.run(scenario())


def test_archiver_recovers_first(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        log = make_log(redis_url)
        await log.create_topic(TopicConfig("t", 3, page_size=2))
        await produce(log, "t", 1, [b"1", b"2"])
        await Archiver(log, pool, idle_close_ms=0).run_once()
        await log.redis.flushall()
        summary = await Archiver(log, pool).run_once()
        assert summary.problems == []
        assert (await log.state("t", 1)).log_end == 2
        async with pool.acquire() as conn:
            topics = await restored_topics(conn)
        # every partition restored at its archived end, with the bumped epoch recorded
        restored = [(await log.state("t", p)).leader_epoch for p in range(3)]
        assert [p.log_end for p in topics[0].partitions] == [0, 2, 0]
        assert [p.leader_epoch for p in topics[0].partitions] == restored
        await pool.close()

    asyncio.run(scenario())


def test_ids_lost_with_redis_are_recorded_and_the_watermark_promise_holds(
    redis_url: str, pg_dsn: str
) -> None:
    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        log = make_log(redis_url)
        await log.enable_archiving()
        await log.create_topic(TopicConfig("a", 1, page_size=5))
        await log.create_topic(TopicConfig("b", 1, page_size=5))
        await produce(log, "a", 0, [b"x"] * 10)  # ids 1-10: two closed pages
        await produce(log, "a", 0, [b"open"] * 3)  # ids 11-13: the open page, lost
        await produce(log, "b", 0, [b"y"] * 5)  # ids 14-18: a closed page
        await Archiver(log, pool, idle_close_ms=None).run_once()
        assert (await status(pool)).watermark == 10  # a[0]'s open page holds it back

        await log.redis.flushall()
        assert await recover(log, pool)
        after = await status(pool)
        assert [(r.first_id, r.last_id) for r in after.lost] == [(11, 18)]
        new = await produce(log, "a", 0, [b"new"] * 5)
        assert new[0].offset == 10 and new[0].id == 19
        await Archiver(log, pool, idle_close_ms=None).run_once()
        mark = (await status(pool)).watermark
        assert mark == 23
        async with pool.acquire() as conn:
            archived = {r[0] for r in await conn.fetch("SELECT id FROM record")}
        lost = set(range(11, 19)) - archived
        assert lost == {11, 12, 13}
        # Every id up to the watermark is archived or in a lost range: nothing unexplained.
        assert set(range(1, mark + 1)) - archived <= set(range(11, 19))
        await pool.close()

    asyncio.run(scenario())


def test_a_restore_goes_above_epochs_raised_since_the_last_pass(
    redis_url: str, pg_dsn: str
) -> None:
    """A leader move after the archiver's last pass raised the epoch in Redis only, and a
    consumer read records under it that Redis then lost: the restore's epoch is above it,
    so the consumer's check (OffsetForLeaderEpoch, KIP-320) finds the truncation."""

    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        log = make_log(redis_url)
        await log.create_topic(TopicConfig("t", 1, page_size=2))
        await produce(log, "t", 0, [b"a", b"b"])
        await Archiver(log, pool, idle_close_ms=0).run_once()  # epoch 0 archived
        assert (await log.lead([("t", 0, "", "1")]))[0][0]
        done, _, seen_epoch = (await log.lead([("t", 0, "1", "2")]))[0]
        assert done and seen_epoch == 1
        await produce(log, "t", 0, [b"seen"] * 3)  # offsets 2-4, read under epoch 1
        await log.redis.flushall()
        assert await recover(log, pool)
        await produce(log, "t", 0, [b"new"] * 4)  # offsets 2-5 again
        assert (await log.state("t", 0)).leader_epoch > seen_epoch
        assert await log.epoch_end_offset("t", 0, seen_epoch) == (0, 2)  # diverged at 2
        await pool.close()

    asyncio.run(scenario())
