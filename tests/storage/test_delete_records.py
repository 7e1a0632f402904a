"""DeleteRecords with an archive: the rows below the new log start go, no read serves
them, the archiver neither archives them nor takes them for a gap or a loss, and a restore
of Redis keeps the floor."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.log import Log
from kafkaesque.records.batch import base_offset
from storage_pg import Archiver, ArchiveReader, create_pool
from storage_pg.recovery import recover
from storage_pg.tiered import Archive, attach
from tests.storage.common import Row, archived_rows, fetchval, make_log, produce
from tests.storage.test_cold import decoded
from tests.storage.test_served import cli, ok


async def fifty_rows(log: Log, create: bool = True) -> list[Row]:
    """Offsets 0..49 of t[0] in batches of 5, pages of 10 records."""
    if create:
        await log.create_topic(TopicConfig("t", 1, page_size=10))
    rows = []
    for i in range(0, 50, 5):
        rows += await produce(log, "t", 0, [b"v%d" % n for n in range(i, i + 5)])
    return rows


async def offsets_from(log: Log, offset: int) -> list[int]:
    """The offsets reads from ``offset`` return, to the end."""
    out: list[int] = []
    while True:
        result = await log.read("t", 0, offset)
        assert not result.below_start, (offset, result)
        if not result.batches:
            return out
        out += [r[0] for r in decoded(result.batches, offset)]
        offset = out[-1] + 1


async def partition_value(dsn: str, sql: str) -> object:
    return await fetchval(dsn, sql + " WHERE topic = 't' AND partition = 0")


async def log_start(dsn: str) -> object:
    return await partition_value(dsn, "SELECT log_start FROM partition_state")


async def archived_through(dsn: str) -> object:
    return await partition_value(dsn, "SELECT archived_through FROM archive_progress")


async def no_gaps_nor_losses(dsn: str) -> None:
    """What the Spark export reports as records missing from its cut: none."""
    assert await fetchval(dsn, "SELECT count(*) FROM dropped_range") == 0
    assert await fetchval(dsn, "SELECT count(*) FROM lost_range") == 0


def test_archived_rows_go_and_no_store_serves_them(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        archive = Archive(pg_dsn)
        log = attach(make_log(redis_url), archive)
        await log.enable_archiving()
        rows = await fifty_rows(log)
        archiver = await archive.archiver(log, idle_close_ms=0)
        assert (await archiver.run_once()).rows == 50
        await log.release_archived()  # every offset is read from the archive now
        assert (await log.state("t", 0)).log_start == 50

        assert await log.delete_records("t", 0, 25) == 25
        assert await archived_rows(pg_dsn) == rows[25:]
        assert await log_start(pg_dsn) == 25
        assert await log.earliest_offset("t", 0) == 25
        # Below the floor: out of range, not a gap read across to offset 25.
        result = await log.read("t", 0, 10)
        assert result.below_start and result.log_start == 25 and result.skipped_to is None
        assert await offsets_from(log, 25) == list(range(25, 50))

        # The archiver goes on; nothing it reports is missing, the watermark passes all.
        await produce(log, "t", 0, [b"more"] * 5)
        summary = await archiver.run_once()
        assert (summary.rows, summary.gaps) == (5, [])
        assert summary.watermark == await log.sequence_counter()
        await no_gaps_nor_losses(pg_dsn)
        await archive.close()

    asyncio.run(scenario())


def test_unarchived_records_below_the_floor_are_never_archived(redis_url: str, pg_dsn: str) -> None:
    """The archive knew the topic: it goes on from the floor, inside the page across it."""

    async def scenario() -> None:
        archive = Archive(pg_dsn)
        log = attach(make_log(redis_url), archive)
        await log.enable_archiving()
        await log.create_topic(TopicConfig("t", 1, page_size=10))
        archiver = await archive.archiver(log, idle_close_ms=0)
        await archiver.run_once()  # the topic's row; nothing to archive yet
        rows = await fifty_rows(log, create=False)

        assert await log.delete_records("t", 0, 25) == 25
        assert (await log_start(pg_dsn), await archived_through(pg_dsn)) == (25, 25)
        summary = await archiver.run_once()
        assert (summary.rows, summary.gaps, summary.problems) == (25, [], [])
        assert await archived_rows(pg_dsn) == rows[25:]
        assert summary.watermark == rows[-1].id
        await no_gaps_nor_losses(pg_dsn)
        await archive.close()

    asyncio.run(scenario())


def test_a_delete_the_archive_missed_is_carried_there(redis_url: str, pg_dsn: str) -> None:
    """Deleted in Redis alone (a command without the archive, or a topic the archive did
    not know yet): the archiver deletes there too and reports no gap."""

    async def scenario() -> None:
        log = make_log(redis_url)
        await log.enable_archiving()
        await fifty_rows(log)
        pool = await create_pool(pg_dsn)
        archiver = Archiver(log, pool, idle_close_ms=0)
        await archiver.run_once()  # archives 0..49
        late = await produce(log, "t", 0, [b"late"] * 5)  # 50..54, not archived

        assert await log.delete_records("t", 0, 52) == 52
        # The ids of deleted, unarchived records (50, 51) do not hold the watermark back.
        assert await archiver.advance_watermark() == late[1].id
        summary = await archiver.run_once()
        assert (summary.rows, summary.gaps) == (3, [])
        assert await archived_rows(pg_dsn) == late[2:]
        assert (await log_start(pg_dsn), await archived_through(pg_dsn)) == (52, 55)
        assert summary.watermark == late[-1].id
        await no_gaps_nor_losses(pg_dsn)
        await pool.close()

    asyncio.run(scenario())


def test_the_archiver_finishes_a_delete_that_did_not_reach_redis(
    redis_url: str, pg_dsn: str
) -> None:
    """The archive deletes first: a crash before Redis' floor moved leaves Redis serving the
    old start (nothing reported deleted comes back), until a retry or the archiver's next
    pass over the partition raises it."""

    async def scenario() -> None:
        archive = Archive(pg_dsn)
        log = attach(make_log(redis_url), archive)
        await log.enable_archiving()
        await log.create_topic(TopicConfig("t", 1, page_size=10, max_pages=3))
        await fifty_rows(log, create=False)
        archiver = await archive.archiver(log, idle_close_ms=0)
        await archiver.run_once()
        assert (await log.state("t", 0)).log_start == 20  # 3 pages kept once archived
        config = await log.topic("t")
        await archive.delete_records("t", config.topic_id, 0, 30)  # then the crash

        # Redis still serves 20..29; below 20 nothing remains (the first read skips there).
        assert await log.earliest_offset("t", 0) == 20
        assert await offsets_from(log, 0) == list(range(20, 50))
        await produce(log, "t", 0, [b"more"])  # an idle partition costs the archiver nothing
        await archiver.run_once()
        state = await log.state("t", 0)
        assert (state.floor, state.log_start) == (30, 30)
        assert (await log.read("t", 0, 29)).below_start
        await archive.close()

    asyncio.run(scenario())


def test_a_restore_of_redis_keeps_the_floor(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        archive = Archive(pg_dsn)
        log = attach(make_log(redis_url), archive)
        await log.enable_archiving()
        await fifty_rows(log)
        archiver = await archive.archiver(log, idle_close_ms=0)
        await archiver.run_once()
        await produce(log, "t", 0, [b"lost"] * 10)  # 50..59, lost with Redis
        assert await log.delete_records("t", 0, 55) == 55  # past what is archived

        await log.redis.flushall()
        assert await recover(log, await archive.pool())
        state = await log.state("t", 0)
        # The partition goes on after the deleted offsets, never under them.
        assert (state.floor, state.log_start, state.log_end) == (55, 55, 55)
        result = await log.read("t", 0, 40)
        assert result.below_start and result.log_start == 55
        appended = await produce(log, "t", 0, [b"new"])
        assert appended[0].offset == 55
        await archive.close()

    asyncio.run(scenario())


def test_cli_deletes_through_the_archive_and_consume_starts_after(
    redis_url: str, pg_dsn: str, tmp_path: Path
) -> None:
    async def setup() -> None:
        log = make_log(redis_url)
        await log.enable_archiving()
        await fifty_rows(log)
        await Archiver(log, await create_pool(pg_dsn), idle_close_ms=0).run_once()
        await log.release_archived()

    asyncio.run(setup())

    def run(*args: str) -> str:
        return ok(cli(redis_url, tmp_path, *args, pg_dsn=pg_dsn))

    assert run("delete-records", "t", "--before", "30") == ""
    assert asyncio.run(fetchval(pg_dsn, 'SELECT min("offset") FROM record')) == 30
    consumed = cli(redis_url, tmp_path, "consume", "t", pg_dsn=pg_dsn)
    assert consumed.stdout.decode().split() == [f"v{n}" for n in range(30, 50)]
    assert consumed.stderr == b""  # the deleted offsets are no gap


def test_the_earliest_offset_keeps_a_floor_the_archive_has_not_heard_of(
    redis_url: str, pg_dsn: str
) -> None:
    """DeleteRecords through a Log without the archive (a command run without it): until
    the archiver carries the floor over, the archive still holds the records below it.
    The earliest offset is the floor, not the archive's first row, where a read would be
    refused as deleted (a consumer reset to the earliest would loop)."""

    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        plain = make_log(redis_url)
        await plain.enable_archiving()
        await plain.create_topic(TopicConfig("t", 1, page_size=2))
        for i in range(3):
            await produce(plain, "t", 0, [b"%d" % i, b"x"])
        await Archiver(plain, pool, idle_close_ms=0).run_once()
        assert await plain.delete_records("t", 0, 4) == 4  # Redis only
        served = make_log(redis_url, cold=ArchiveReader(pool))
        assert await served.earliest_offset("t", 0) == 4
        result = await served.read("t", 0, 4)
        assert not result.below_start and base_offset(result.batches[0]) == 4
        await pool.close()

    asyncio.run(scenario())
