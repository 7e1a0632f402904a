"""PostgreSQL going away: the archiver fails clearly, retries, and loses nothing."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import StorageUnavailable
from kafkaesque.partition.layer import EARLIEST, LATEST, FoundOffset, OffsetLookup, Partitions
from storage_pg import Archiver, ArchiveSummary, create_pool
from storage_pg.archiver import CONNECTION_ERRORS
from storage_pg.tiered import Archive, attach
from tests.pg import PostgresServer
from tests.servers import free_port
from tests.storage.common import Row, archived_rows, make_log, produce


def test_postgres_stopped_mid_run(
    redis_url: str, pg_dsn: str, pg_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="storage_pg")

    async def scenario() -> None:
        log = make_log(redis_url)
        await log.enable_archiving()
        # Short retention: without the archive's hold, these pages would be gone at once.
        await log.create_topic(TopicConfig("t", 2, page_size=50, ttl=1, max_pages=1))
        rows: list[Row] = []
        for i in range(80):
            rows += await produce(log, "t", i % 2, [b"r%d" % j for j in range(100)])
        pool = await create_pool(pg_dsn)
        archiver = Archiver(log, pool, idle_close_ms=0, pages_per_transaction=1)

        def stop_when_busy(summary: ArchiveSummary) -> None:
            if summary.rows >= 1000 and pg_server.proc is not None:
                pg_server.stop()  # in the middle of the run

        with pytest.raises(CONNECTION_ERRORS):
            await archiver.run_once(stop_when_busy)
        with pytest.raises(CONNECTION_ERRORS):
            await archiver.run_once()  # still down: a clear connection error

        # Redis keeps every page not archived yet, TTL and max pages notwithstanding.
        await asyncio.sleep(1.2)
        for p in (0, 1):
            state = await log.state("t", p)
            first = await log.first_unarchived_sequence("t", p)
            assert first is not None
            held = [r for r in rows if r.partition == p and r.offset >= state.log_start]
            assert state.records == len(held) and held[0].id <= first

        # The archiver keeps retrying until PostgreSQL is back, then archives the rest.
        stop = asyncio.Event()
        task = asyncio.create_task(archiver.run_forever(0.1, max_backoff=0.4, stop=stop))
        await asyncio.sleep(1.0)
        assert not task.done()
        assert "cannot reach PostgreSQL" in caplog.text
        await asyncio.to_thread(pg_server.start)
        deadline = time.monotonic() + 30
        while len(await archived_rows(pg_dsn)) < len(rows):
            assert time.monotonic() < deadline, "the archiver did not catch up"
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.wait_for(task, 10)
        assert await archived_rows(pg_dsn) == rows
        await pool.close()

    try:
        asyncio.run(scenario())
    finally:
        if pg_server.proc is None:
            pg_server.start()


def test_an_unreachable_archive_gives_no_earliest_offset(redis_url: str) -> None:
    """The archive may hold offsets below Redis' oldest: while it cannot be asked, the
    earliest offset is an error to retry (KAFKA_STORAGE_ERROR on the wire), not Redis'
    start, which would move a consumer reset to the earliest past the archived records."""

    async def scenario() -> None:
        log = make_log(redis_url)
        await log.create_topic(TopicConfig("t", 1, page_size=1))
        await produce(log, "t", 0, [b"first", b"kept"])
        archive = Archive(f"postgresql://kafkaesque@127.0.0.1:{free_port()}/kafkaesque")
        attach(log, archive)
        assert await log.earliest_offset("t", 0) == 0  # nothing can be below Redis' 0
        await log.raise_floor("t", 0, 1)  # Redis starts at 1: the archive could hold 0
        with pytest.raises(StorageUnavailable, match="unreachable"):
            await log.earliest_offset("t", 0)
        with pytest.raises(StorageUnavailable, match="unreachable"):
            await log.offset_for_timestamp("t", 0, 0)
        lookups = [OffsetLookup("t", 0, EARLIEST), OffsetLookup("t", 0, LATEST)]
        earliest, latest = await Partitions(log).list_offsets(lookups)
        assert isinstance(earliest, StorageUnavailable)
        assert isinstance(latest, FoundOffset) and latest.offset == 2  # Redis alone knows it
        await archive.close()

    asyncio.run(scenario())
