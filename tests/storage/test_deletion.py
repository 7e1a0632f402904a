"""Deleting a topic deletes its archived records, as Kafka deletes a topic's data."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import StorageUnavailable, UnknownTopic
from storage_pg import Archiver, create_pool
from storage_pg.tiered import Archive, attach
from tests.servers import free_port
from tests.storage.common import archived_rows, fetchval, make_log, produce


def test_delete_removes_the_archived_records_and_a_recreated_topic_is_archived(
    redis_url: str, pg_dsn: str
) -> None:
    async def scenario() -> None:
        archive = Archive(pg_dsn)
        log = attach(make_log(redis_url), archive)
        await log.create_topic(TopicConfig("t", 2, page_size=2))
        await log.create_topic(TopicConfig("keep", 1, page_size=2))
        await produce(log, "t", 0, [b"old"] * 4)
        await produce(log, "t", 1, [b"old"] * 2)
        kept = await produce(log, "keep", 0, [b"k"] * 2)
        archiver = await archive.archiver(log, idle_close_ms=0)
        assert (await archiver.run_once()).rows == 8
        old_id = uuid.UUID(bytes=(await log.topic("t")).topic_id)

        await log.delete_topic("t")
        assert await archived_rows(pg_dsn) == kept
        assert await fetchval(pg_dsn, "SELECT count(*) FROM topic WHERE name = 't'") == 0
        assert await fetchval(pg_dsn, "SELECT count(*) FROM archive_progress") == 1
        assert await fetchval(pg_dsn, "SELECT topic_id FROM deleted_topic") == old_id
        with pytest.raises(UnknownTopic):
            await log.delete_topic("t")

        # The same name again is a new log from offset 0, archived by the same archiver
        # (whose memory of the old partitions must not make it skip the new ones).
        await log.create_topic(TopicConfig("t", 1, page_size=2))
        new = await produce(log, "t", 0, [b"new"] * 4)
        assert (await archiver.run_once()).rows == 4
        assert await archived_rows(pg_dsn) == sorted(kept + new, key=lambda r: r.id)
        assert await log.read("t", 0, 0, 1 << 20)  # readable from the start
        await archive.close()

    asyncio.run(scenario())


def test_topic_deleted_without_the_archive_attached(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        log = make_log(redis_url)
        await log.create_topic(TopicConfig("t", 1, page_size=2))
        await produce(log, "t", 0, [b"old"] * 4)
        pool = await create_pool(pg_dsn)
        archiver = Archiver(log, pool, idle_close_ms=0)
        await archiver.run_once()
        await log.delete_topic("t")  # the archive did not hear of it
        await log.create_topic(TopicConfig("t", 1, page_size=2))
        new = await produce(log, "t", 0, [b"new"] * 4)
        # The archiver sees another topic id under the name: the old one was deleted.
        summary = await archiver.run_once()
        assert summary.rows == 4 and not summary.problems
        assert await archived_rows(pg_dsn) == new

        # Deleted while no archive was attached and not created again: a delete with the
        # archive attached still removes what the archive has.
        await log.create_topic(TopicConfig("gone", 1, page_size=1))
        await produce(log, "gone", 0, [b"g"])
        await archiver.run_once()
        await log.delete_topic("gone")
        archive = Archive(pg_dsn)
        await attach(make_log(redis_url), archive).delete_topic("gone")
        assert await archived_rows(pg_dsn) == new
        with pytest.raises(UnknownTopic):
            await attach(make_log(redis_url), archive).delete_topic("gone")
        await archive.close()
        await pool.close()

    asyncio.run(scenario())


def test_an_archiver_does_not_bring_a_deleted_topic_back(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        archive = Archive(pg_dsn)
        log = attach(make_log(redis_url), archive)
        await log.create_topic(TopicConfig("t", 1, page_size=1))
        await produce(log, "t", 0, [b"a", b"b"])
        archiver = await archive.archiver(log, idle_close_ms=0)
        await archiver.run_once()
        # The window of a delete: gone from the archive, still in Redis.
        config = await log.topic("t")
        await archive.delete_topic("t", config.topic_id, config.partitions)
        await produce(log, "t", 0, [b"c"])
        summary = await archiver.run_once()
        assert summary.rows == 0 and not summary.problems
        assert await archived_rows(pg_dsn) == []
        assert await fetchval(pg_dsn, "SELECT count(*) FROM topic") == 0
        await archive.close()

    asyncio.run(scenario())


def test_a_delete_that_cannot_reach_the_archive_deletes_nothing(redis_url: str) -> None:
    async def scenario() -> None:
        log = make_log(redis_url)
        await log.create_topic(TopicConfig("t", 1))
        await produce(log, "t", 0, [b"kept"])
        archive = Archive(f"postgresql://kafkaesque@127.0.0.1:{free_port()}/kafkaesque")
        attach(log, archive)
        with pytest.raises(StorageUnavailable, match="topic t was not deleted"):
            await log.delete_topic("t")
        assert (await log.state("t", 0)).log_end == 1
        await archive.close()

    asyncio.run(scenario())


def test_a_restore_never_reuses_a_deleted_topics_ids(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        archive = Archive(pg_dsn)
        log = attach(make_log(redis_url), archive)
        await log.enable_archiving()
        await log.create_topic(TopicConfig("keep", 1, page_size=1))
        await log.create_topic(TopicConfig("t", 1, page_size=1))
        await produce(log, "keep", 0, [b"k"])
        deleted = await produce(log, "t", 0, [b"x"] * 3, producer=(77, 0, 0))
        await (await archive.archiver(log, idle_close_ms=0)).run_once()
        await log.delete_topic("t")
        await log.redis.flushall()
        assert await log.list_topics() == ["keep"]  # restored, without the deleted topic
        assert await log.sequence_counter() >= deleted[-1].id
        assert await log.new_producer_id() > 77
        await archive.close()

    asyncio.run(scenario())


def test_deletes_racing_an_archiver_leave_nothing_behind(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        archive = Archive(pg_dsn)
        log = attach(make_log(redis_url), archive)
        archiver = await archive.archiver(make_log(redis_url), idle_close_ms=0)
        kept = []
        await log.create_topic(TopicConfig("keep", 1, page_size=1))
        for round_ in range(15):
            await log.create_topic(TopicConfig("t", 2, page_size=1))
            for partition in (0, 1):
                await produce(log, "t", partition, [b"x"] * (1 + round_ % 3))
            kept += await produce(log, "keep", 0, [b"%d" % round_])
            delay = round_ % 5 * 0.002  # the delete lands at different points of the run

            async def delete_later(delay: float = delay) -> None:
                await asyncio.sleep(delay)
                await log.delete_topic("t")

            await asyncio.gather(archiver.run_once(), delete_later())
            await archiver.run_once()
            assert await archived_rows(pg_dsn) == kept, f"round {round_}"
        assert await fetchval(pg_dsn, "SELECT count(*) FROM deleted_topic") == 15
        await archive.close()

    asyncio.run(scenario())
