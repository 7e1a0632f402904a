"""Crash safety: an archiver killed (SIGKILL) at random points loses and duplicates nothing,
and neither does PostgreSQL killed after a pass."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from kafkaesque.config.topic_config import TopicConfig
from storage_pg import Archiver, create_pool, ensure_schema, status
from tests.pg import PostgresServer
from tests.storage.common import Row, archived_rows, make_log, produce

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = [("c1", 0), ("c1", 1), ("c2", 0), ("c2", 1)]


def test_sigkill_at_random_points_loses_and_duplicates_nothing(redis_url: str, pg_dsn: str) -> None:
    rng = random.Random(7)

    async def produce_some(log, expected: list[Row], batches: int) -> None:
        for _ in range(batches):
            topic, partition = rng.choice(PARTITIONS)
            values = [rng.randbytes(rng.randint(10, 100)) for _ in range(rng.randint(1, 60))]
            expected += await produce(log, topic, partition, values)

    async def setup(expected: list[Row]) -> None:
        log = make_log(redis_url)
        await log.enable_archiving()
        for name in ("c1", "c2"):
            await log.create_topic(TopicConfig(name, 2, page_size=40, max_pages=2, ttl=3600))
        await produce_some(log, expected, 150)

    expected: list[Row] = []
    asyncio.run(setup(expected))
    killed = 0
    for _ in range(20):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.storage.archive_once", redis_url, pg_dsn],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started"
        time.sleep(rng.uniform(0, 0.15))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        killed += "done" not in out
        asyncio.run(produce_some(make_log(redis_url), expected, 80))
    assert killed >= 10  # most runs died half-way

    async def finish() -> None:
        log = make_log(redis_url)
        pool = await create_pool(pg_dsn)
        summary = await Archiver(log, pool, idle_close_ms=0).run_once()
        assert summary.problems == []
        assert await archived_rows(pg_dsn) == sorted(expected, key=lambda r: r.id)
        st = await status(pool)
        assert st.watermark == max(r.id for r in expected)
        for p in st.partitions:
            state = await log.state(p.topic, p.partition)
            assert p.archived_through == state.log_end
            assert p.records == sum(
                1 for r in expected if (r.topic, r.partition) == (p.topic, p.partition)
            )
            assert await log.first_unarchived_sequence(p.topic, p.partition) is None
        await pool.close()

    asyncio.run(finish())


def test_archived_pages_survive_a_postgresql_crash_with_asynchronous_commit(
    redis_url: str,
) -> None:
    """Redis drops a page once the transaction that archived it has committed, so that
    commit must be durable even where synchronous_commit is off (a server default some
    choose for speed). Found by the chaos suite: PostgreSQL killed just after a pass took
    the pass back, and its records, already gone from Redis, were recorded as a gap."""
    server = PostgresServer({"synchronous_commit": "off"})
    try:
        server.admin("CREATE DATABASE crash")
        dsn = server.dsn("crash")
        expected: list[Row] = []

        async def archive() -> None:
            log = make_log(redis_url)
            await log.enable_archiving()
            await log.create_topic(TopicConfig("c", 1, page_size=10, max_pages=1))
            for i in range(10):
                expected.extend(await produce(log, "c", 0, [b"v%d-%d" % (i, j) for j in range(10)]))
            pool = await create_pool(dsn)
            async with pool.acquire() as conn:
                await ensure_schema(conn)
                await conn.execute("CHECKPOINT")  # only the pass below is at stake
            summary = await Archiver(log, pool, idle_close_ms=0).run_once()
            await pool.close()
            assert summary.rows == 100
            assert (await log.state("c", 0)).log_start == 90  # Redis let 9 pages go

        asyncio.run(archive())
        server.kill()
        server.start()
        assert asyncio.run(archived_rows(dsn)) == expected
    finally:
        server.destroy()
