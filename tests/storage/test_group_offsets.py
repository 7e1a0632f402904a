"""Committed group offsets survive Redis losing its data: archived on each pass, restored
with the topics (as committed, even past the restored log ends), never wiped by an empty
Redis."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import Code
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.groups.state import GroupState
from kafkaesque.groups.types import CoordinatorConfig, JoinRequest
from kafkaesque.hot.group_offsets import CommittedOffset, OffsetsSnapshot
from storage_pg import Archiver, create_pool, recover
from storage_pg import group_offsets as archived
from storage_pg.schema import ensure_schema
from tests.storage.common import make_log, produce


def test_offsets_come_back_after_flushall_as_committed(
    redis_url: str, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        log = make_log(redis_url)
        groups = GroupCoordinator(log)
        await log.enable_archiving()
        await log.create_topic(TopicConfig("t", 2, page_size=5))
        await produce(log, "t", 0, [b"x"] * 10)  # two closed pages: archived
        await produce(log, "t", 0, [b"open"] * 3)  # offsets 10-12: open page, lost
        await produce(log, "t", 1, [b"y"] * 5)
        await groups.admin.commit(
            "g1", -1, "", None, {("t", 0): (12, "meta", 7), ("t", 1): (3, "", -1)}
        )
        await groups.admin.commit("g2", -1, "", None, {("t", 1): (5, None, -1)})
        await groups.admin.commit("gone", -1, "", None, {("t", 0): (1, None, -1)})
        await Archiver(log, pool, idle_close_ms=None).run_once()
        assert await groups.admin.delete("gone") == 0
        await Archiver(log, pool, idle_close_ms=None).run_once()  # the delete reaches it

        await log.redis.flushall()
        assert await groups.admin.list_groups() == []
        # An archiver pass on the empty Redis before recovery keeps the archived offsets.
        assert await groups.admin.offsets.snapshot() is None
        with caplog.at_level(logging.WARNING, logger="storage_pg.recovery"):
            assert await recover(log, pool)

        assert await groups.admin.list_groups() == ["g1", "g2"]
        assert (await groups.store.load("g1")).state == GroupState.EMPTY
        g1 = await groups.admin.committed("g1")
        # t[0]: 12 was committed, but only 0-9 were archived; 10 on goes to new records.
        # The offset stays 12 with its epoch, so the group's consumers see the truncation
        # (OffsetForLeaderEpoch(7) ends at 10, below it) rather than read 10-11 again.
        assert g1[("t", 0)].offset == 12 and g1[("t", 0)].metadata == "meta"
        assert g1[("t", 0)].leader_epoch == 7
        assert await log.epoch_end_offset("t", 0, 7) == (0, 10)
        assert g1[("t", 1)].offset == 3
        assert (await groups.admin.committed("g2"))[("t", 1)].offset == 5
        warnings = [r.getMessage() for r in caplog.records]
        assert len(warnings) == 1 and "group g1: committed offset 12 of t[0] is past" in warnings[0]
        await pool.close()

    asyncio.run(scenario())


def test_commits_after_the_loss_win_over_the_archive(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        log = make_log(redis_url)
        groups = GroupCoordinator(log)
        await log.enable_archiving()
        await log.create_topic(TopicConfig("t", 1, page_size=5))
        await produce(log, "t", 0, [b"x"] * 10)
        await groups.admin.commit("g", -1, "", None, {("t", 0): (4, None, -1)})
        await Archiver(log, pool, idle_close_ms=None).run_once()
        await log.redis.flushall()
        # A member still running commits before anything restored Redis.
        await groups.admin.commit("g", -1, "", None, {("t", 0): (8, None, -1)})
        assert await recover(log, pool)
        assert (await groups.admin.committed("g"))[("t", 0)].offset == 8
        # ... and the next pass archives it.
        await Archiver(log, pool, idle_close_ms=None).run_once()
        async with pool.acquire() as conn:
            assert (await archived.load(conn))["g"][("t", 0)].offset == 8
        await pool.close()

    asyncio.run(scenario())


def test_an_older_snapshot_never_overwrites_a_newer_one(pg_dsn: str) -> None:
    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        newer = OffsetsSnapshot(2000, {"g": {("t", 0): CommittedOffset(9, "", 1900)}})
        older = OffsetsSnapshot(1000, {"g": {("t", 0): CommittedOffset(3, "", 900)}})
        async with pool.acquire() as conn:
            await ensure_schema(conn)
            assert await archived.save(conn, newer)
            assert not await archived.save(conn, older)
            assert (await archived.load(conn))["g"][("t", 0)].offset == 9
            assert await archived.save(conn, OffsetsSnapshot(3000, {}))  # every group deleted
            assert await archived.load(conn) == {}
        await pool.close()

    asyncio.run(scenario())


def test_a_group_comes_back_with_its_members(redis_url: str, pg_dsn: str) -> None:
    """As Kafka's coordinator loads a group after a failover: the member goes on
    heartbeating at its generation (no rebalance, so it keeps its position and its fetches
    are fenced by the new epoch), its session counted from the restore."""

    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        log = make_log(redis_url)
        config = CoordinatorConfig(initial_rebalance_delay_ms=0)
        groups = GroupCoordinator(log, config)
        groups.start()
        await log.enable_archiving()
        await log.create_topic(TopicConfig("t", 1, page_size=5))
        request = JoinRequest("", None, "c", "/h", 6000, 6000, "consumer", [("range", b"m")], False)
        joined = await groups.join("g", request)
        member, generation = joined.member_id, joined.generation
        assert (await groups.sync("g", generation, member, None, {member: b"all"})).error == 0
        await groups.admin.commit("g", generation, member, None, {("t", 0): (0, "", -1)})
        await groups.admin.commit("lonely", -1, "", None, {("t", 0): (0, "", -1)})
        await Archiver(log, pool, idle_close_ms=None).run_once()

        await log.redis.flushall()
        assert await recover(log, pool)
        group = await groups.store.load("g")
        assert group is not None and group.state == GroupState.STABLE
        assert (group.generation, list(group.members)) == (generation, [member])
        assert await groups.heartbeat("g", generation, member, None) == Code.NONE
        assert (await groups.sync("g", generation, member, None, {})).assignment == b"all"
        assert (await groups.store.load("lonely")).state == GroupState.EMPTY  # type: ignore[union-attr]
        # Its session runs from the restore: a member that does not come back expires.
        heartbeats = await log.redis.hgetall(log.keys.group("g", ":heartbeats"))
        assert list(heartbeats) == [member.encode()]
        await groups.stop()
        await pool.close()

    asyncio.run(scenario())
