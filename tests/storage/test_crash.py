"""Crash safety: an archiver killed (SIGKILL) at random points loses and duplicates nothing."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from kafkaesque.topic_config import TopicConfig
from storage_pg import Archiver, create_pool, status
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
