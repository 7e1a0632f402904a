"""Retention and the archive: nothing closed is lost once archiving is switched on, even
by a first archiver run that dies or outlasts the TTL; records dropped before any archive
existed are a gap every reader agrees on."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest

from kafkaesque.log import Log, TopicConfig
from storage_pg import Archiver, create_pool, status
from tests.storage.common import Row, archived_rows, make_log, produce
from tests.storage.test_crash import REPO

PAGE = 1000
TTL = 1  # second


async def produce_pages(log: Log, topic: str, records: int) -> list[Row]:
    rows: list[Row] = []
    for start in range(0, records, 500):
        values = [b"r%06d" % i for i in range(start, min(start + 500, records))]
        rows += await produce(log, topic, 0, values)
    return rows


async def closed_present(log: Log, topic: str) -> tuple[int, int]:
    """(first, end) of the closed records Redis holds now."""
    state = await log.state(topic, 0)
    pages = await log.closed_pages(topic, 0, 0, max_pages=1 << 20)
    return state.log_start, pages[-1].next_offset if pages else state.log_start


async def finish_and_check(
    redis_url: str, pg_dsn: str, produced: list[Row], first: int, end: int
) -> None:
    """Wait out the TTL, run the archiver again: every closed record present when archiving
    was switched on (offsets first..end) is archived, and what was lost before is a gap."""
    await asyncio.sleep(TTL * 1.5)  # any page still carrying the TTL expires by now
    log = make_log(redis_url)
    pool = await create_pool(pg_dsn)
    try:
        summary = await Archiver(log, pool, idle_close_ms=None).run_once()
        assert summary.problems == []
        archived = await archived_rows(pg_dsn)
        # From the first record present at the switch on, in order, with none missing (the
        # killed run may have closed and archived the open page too).
        assert len(archived) >= end - first
        expected = [r for r in produced if r.offset >= first][: len(archived)]
        assert [r.offset for r in archived] == [r.offset for r in expected]
        assert archived == expected
        st = await status(pool)
        gaps = [(g.first_offset, g.last_offset) for g in st.dropped]
        assert gaps == ([(0, first - 1)] if first else [])
        # The watermark's promise: every id up to it is archived or in a dropped range.
        ids = {r.id for r in archived}
        for i in range(1, st.watermark + 1):
            assert i in ids or any(g.first_id <= i <= g.last_id for g in st.dropped), i
        assert st.watermark >= max(r.id for r in expected)
    finally:
        await pool.close()


@pytest.mark.parametrize("kill_after", [0.0, 0.05, 0.3, 1.0])
def test_first_archive_run_killed_loses_nothing_closed(
    redis_url: str, pg_dsn: str, kill_after: float
) -> None:
    """The issue's reproduction: pages closed with a 1 s TTL before any archive; the first
    archiver run is SIGKILLed after ``kill_after`` seconds, the next one finishes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.archive_once", redis_url, pg_dsn, "--wait"],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "started"

    async def setup() -> list[Row]:
        log = make_log(redis_url)
        await log.create_topic(TopicConfig("a1", 1, page_size=PAGE, ttl=TTL))
        return await produce_pages(log, "a1", 20 * PAGE + 334)

    produced = asyncio.run(setup())
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "switched"
    # What Redis holds now is what was there at the switch: nothing unarchived expires since.
    first, end = asyncio.run(closed_present(make_log(redis_url), "a1"))
    assert end - first >= 10 * PAGE  # most pages were still there
    time.sleep(kill_after)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    asyncio.run(finish_and_check(redis_url, pg_dsn, produced, first, end))


def test_first_archive_run_slower_than_the_ttl_loses_nothing_closed(
    redis_url: str, pg_dsn: str
) -> None:
    async def scenario() -> None:
        log = make_log(redis_url)
        await log.create_topic(TopicConfig("a1", 1, page_size=PAGE, ttl=TTL))
        produced = await produce_pages(log, "a1", 20 * PAGE + 334)
        first, end = await closed_present(log, "a1")
        pool = await create_pool(pg_dsn)
        chunks: list[int] = []

        def slow(summary: object) -> None:
            chunks.append(1)
            time.sleep(0.1)  # a page per chunk, 20 chunks: the run outlasts the TTL

        started = time.monotonic()
        archiver = Archiver(log, pool, idle_close_ms=None, pages_per_transaction=1)
        await archiver.run_once(progress=slow)
        assert time.monotonic() - started > TTL and len(chunks) == (end - first) // PAGE
        await pool.close()
        await finish_and_check(redis_url, pg_dsn, produced, first, end)

    asyncio.run(scenario())
