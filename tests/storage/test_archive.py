"""The archiver against a real redis-server and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from pathlib import Path

import asyncpg
import pytest

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.records.batch import Compression
from kafkaesque.records.build import build_batch
from storage_pg import (
    Archiver,
    ArchiveReader,
    archive_passes,
    create_pool,
    ensure_schema,
    status,
    watermark,
)
from storage_pg.pool import ArchiveError
from storage_pg.schema import SCHEMA_VERSION
from tests.servers import RedisServer
from tests.storage.common import Row, archived_rows, fetchval, make_log, produce

TOPICS = {"alpha": 2, "beta": 3, "gamma.log-1": 1}


async def produce_mixed(
    log, rng: random.Random, rounds: int, sequences: dict[tuple[str, int], int] | None = None
) -> list[Row]:
    """Batches of every compression and record shape, interleaved across topics;
    ``sequences`` carries the idempotent producers' next sequence numbers between calls."""
    expected: list[Row] = []
    sequences = {} if sequences is None else sequences
    for i in range(rounds):
        topic = rng.choice(sorted(TOPICS))
        partition = rng.randrange(TOPICS[topic])
        n = rng.randint(1, 40)
        shape = i % 6
        values: list[bytes | None] = [rng.randbytes(rng.randint(0, 300)) for _ in range(n)]
        keys = headers = producer = None
        if shape == 1:  # keys: null, empty and non-empty; a null value (a tombstone)
            keys = [None if j % 3 == 0 else b"" if j % 3 == 1 else b"k%d" % j for j in range(n)]
            values[0] = None
        elif shape == 2:  # headers, with null, empty and binary values
            headers = [
                [("h", b"\x00\xff"), ("empty", b""), ("null", None), ("ünï", b"x")][: j % 5]
                for j in range(n)
            ]
        elif shape == 3:  # an idempotent producer
            pid = 1000 + partition
            seq = sequences.get((topic, partition), 0)
            producer = (pid, 3, seq)
            sequences[(topic, partition)] = seq + n
        elif shape == 4:  # big values: several varint bytes for every length
            values = [rng.randbytes(rng.randint(200, 20_000)) for _ in range(n)]
        timestamps = [1_700_000_000_000 + rng.randint(-5000, 5000) for _ in range(n)]
        expected += await produce(
            log,
            topic,
            partition,
            values,
            keys=keys,
            headers=headers,
            timestamps=timestamps,
            compression=Compression(i % 5),
            producer=producer,
        )
    return expected


async def create_topics(log, page_size: int = 50, **kwargs) -> None:
    for name, partitions in TOPICS.items():
        await log.create_topic(TopicConfig(name, partitions, page_size=page_size, **kwargs))


def test_archives_every_record_as_produced(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        log = make_log(redis_url)
        await create_topics(log)
        sequences: dict[tuple[str, int], int] = {}
        expected = await produce_mixed(log, random.Random(1), 120, sequences)
        pool = await create_pool(pg_dsn)
        archiver = Archiver(log, pool, idle_close_ms=0)
        summary = await archiver.run_once()
        assert summary.rows == len(expected) and summary.rejected == 0
        assert summary.problems == []
        rows = await archived_rows(pg_dsn)
        # ids follow produce order across topics, and every field is as produced
        assert [r.id for r in rows] == sorted(r.id for r in expected)
        assert rows == expected
        assert summary.watermark == expected[-1].id == await watermark(pool)
        # a second run finds nothing new
        again = await archiver.run_once()
        assert (again.rows, again.pages) == (0, 0)
        assert await archived_rows(pg_dsn) == expected
        # new records are archived after the old ones, by a fresh archiver too
        more = await produce_mixed(log, random.Random(2), 30, sequences)
        third = await Archiver(log, pool, idle_close_ms=0).run_once()
        assert third.rows == len(more)
        assert await archived_rows(pg_dsn) == expected + more
        # the two passes that archived are recorded, newest first; the idle one is not
        passes = await archive_passes.recent(pool)
        assert [(p.rows, p.watermark) for p in passes] == [
            (len(more), more[-1].id),
            (len(expected), expected[-1].id),
        ]
        assert all(p.bytes > 0 and p.finished_at >= p.started_at for p in passes)
        # status: per partition, archived through the log end
        st = await status(pool)
        assert st.schema_version == SCHEMA_VERSION and st.watermark == more[-1].id
        for p in st.partitions:
            end = (await log.state(p.topic, p.partition)).log_end
            held = sum(
                1 for r in expected + more if (r.topic, r.partition) == (p.topic, p.partition)
            )
            assert (p.archived_through, p.records) == (end, held)
        assert {(p.topic, p.partition) for p in st.partitions} == {
            (t, p) for t, n in TOPICS.items() for p in range(n)
        }
        await pool.close()

    asyncio.run(scenario())


def test_open_pages_wait_until_idle(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        log = make_log(redis_url)
        await log.create_topic(TopicConfig("t", 1, page_size=10))
        rows = await produce(log, "t", 0, [b"a"] * 15)  # one closed page, an open one
        pool = await create_pool(pg_dsn)
        summary = await Archiver(log, pool, idle_close_ms=None).run_once()
        assert summary.rows == 15  # one batch of 15 overfills the page: it closed
        rows += await produce(log, "t", 0, [b"b"] * 3)  # the open page
        summary = await Archiver(log, pool, idle_close_ms=60_000).run_once()
        assert summary.rows == 0 and summary.watermark == 15  # not idle long enough
        summary = await Archiver(log, pool, idle_close_ms=0).run_once()
        assert summary.rows == 3 and summary.watermark == 18
        assert await archived_rows(pg_dsn) == rows
        await pool.close()

    asyncio.run(scenario())


def test_two_archivers_archive_everything_once(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        log = make_log(redis_url)
        await create_topics(log, page_size=20)
        expected = await produce_mixed(log, random.Random(3), 150)
        pools = [await create_pool(pg_dsn) for _ in range(2)]
        archivers = [
            Archiver(make_log(redis_url), p, idle_close_ms=0, pages_per_transaction=1)
            for p in pools
        ]
        summaries = await asyncio.gather(*(a.run_once() for a in archivers))
        assert sum(s.rows for s in summaries) == len(expected)
        assert sum(s.pages for s in summaries) > 0
        # whatever one of them skipped while the other held it: a rerun finds nothing new
        rest = await archivers[0].run_once()
        assert rest.rows == 0
        assert await archived_rows(pg_dsn) == sorted(expected, key=lambda r: r.id)
        for p in pools:
            await p.close()

    asyncio.run(scenario())


def test_watermark_never_passes_a_gap(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        log = make_log(redis_url)
        for name in ("a", "b"):
            await log.create_topic(TopicConfig(name, 1, page_size=5))
        await produce(log, "a", 0, [b"x"] * 10)  # ids 1..10
        await produce(log, "b", 0, [b"y"] * 10)  # ids 11..20
        await produce(log, "a", 0, [b"z"] * 10)  # ids 21..30
        pool = await create_pool(pg_dsn)
        archiver = Archiver(log, pool, idle_close_ms=0)
        await ensure_schema(pool)
        # Another archiver holds b[0]: ours skips it, so ids 11..20 are missing.
        holder = await asyncpg.connect(pg_dsn)
        tx = holder.transaction()
        await tx.start()
        assert await holder.fetchval("SELECT pg_try_advisory_xact_lock(hashtext('b'), 0)")
        summary = await archiver.run_once()
        assert summary.busy == 1 and summary.rows == 20
        assert summary.watermark == 10 == await watermark(pool)
        await tx.rollback()
        await holder.close()
        # an unarchived open page also holds the watermark back
        await produce(log, "b", 0, [b"w"] * 2)  # ids 31..32, in b's open page
        summary = await Archiver(log, pool, idle_close_ms=None).run_once()
        assert summary.rows == 10 and summary.watermark == 30
        summary = await archiver.run_once()
        assert summary.watermark == 32
        # never decreases, even if asked to
        async with pool.acquire() as conn:
            await conn.execute("UPDATE archive_watermark SET id = 40")
        assert (await archiver.run_once()).watermark == 40
        await pool.close()

    asyncio.run(scenario())


def test_undecodable_batch_is_kept_raw_and_skipped(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        from crc32c import crc32c

        log = make_log(redis_url)
        await log.create_topic(TopicConfig("t", 1, page_size=4))
        good = await produce(log, "t", 0, [b"1", b"2"])
        # A batch whose header and CRC are fine but whose records are garbage: the log
        # accepts it (it checks the header and CRC only).
        batch = bytearray(build_batch([b"abc", b"def"], timestamp=0))
        batch[61:] = b"\x7f" * (len(batch) - 61)
        batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
        await log.append("t", 0, [bytes(batch)])
        good += await produce(log, "t", 0, [b"5", b"6"])
        pool = await create_pool(pg_dsn)
        summary = await Archiver(log, pool, idle_close_ms=0).run_once()
        assert (summary.rows, summary.rejected) == (4, 1)
        assert summary.watermark == 6  # the rejected batch's ids count as archived
        assert await archived_rows(pg_dsn) == good
        row = await fetchval(pg_dsn, "SELECT batch FROM rejected_batch WHERE base_offset = 2")
        assert row is not None and bytes(row)[16:] == bytes(batch)[16:]
        assert (await status(pool)).rejected_batches == 1
        await pool.close()

    asyncio.run(scenario())


def test_a_record_the_archive_refuses_stops_only_its_partition(
    redis_url: str, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value PostgreSQL refuses (here a header key jsonb cannot hold, as it was written
    before keys with U+0000 were encoded) holds back its own partition, said as a
    problem; every other partition is archived."""
    from storage_pg import rows

    def raw_json(headers: list[tuple[str, bytes | None]]) -> str:
        return json.dumps([[k, None] for k, _ in headers])

    monkeypatch.setattr(rows, "headers_json", raw_json)

    async def scenario() -> None:
        log = make_log(redis_url)
        for topic in ("a", "bad", "c"):
            await log.create_topic(TopicConfig(topic, 1, page_size=1))
        good = await produce(log, "a", 0, [b"1"])
        await produce(log, "bad", 0, [b"2"], headers=[[("n\0ul", None)]])
        good += await produce(log, "c", 0, [b"3"])
        pool = await create_pool(pg_dsn)
        summary = await Archiver(log, pool, idle_close_ms=0).run_once()
        assert [r.value for r in await archived_rows(pg_dsn)] == [r.value for r in good]
        assert len(summary.problems) == 1 and "bad[0]: the archive refused" in summary.problems[0]
        assert (await log.state("bad", 0)).log_start == 0  # kept in Redis
        await pool.close()

    asyncio.run(scenario())


async def archive_three_pages(url: str, pg_dsn: str) -> dict:
    """Archive three pages from the Redis at ``url``; Redis' command stats meanwhile."""
    log = make_log(url)
    await log.create_topic(TopicConfig("t", 1, page_size=2))
    for i in range(3):
        await produce(log, "t", 0, [b"%d" % i, b"x"])
    pool = await create_pool(pg_dsn)
    await log.redis.config_resetstat()
    summary = await Archiver(log, pool, idle_close_ms=0).run_once()
    assert (summary.rows, summary.problems) == (6, [])
    await pool.close()
    return await log.redis.info("commandstats")


def test_pages_are_fsynced_in_redis_before_the_archive_commits_them(
    tmp_path: Path, pg_dsn: str
) -> None:
    """On a Redis with an AOF, a chunk's pages are fsynced there (WAITAOF) before the
    archive commits them: a Redis back from a power loss without them would hand their
    offsets out again under the same epoch."""
    server = RedisServer(tmp_path / "aof", appendonly=True)
    try:
        assert asyncio.run(archive_three_pages(server.url, pg_dsn))["cmdstat_waitaof"]["calls"]
    finally:
        server.stop()


def test_without_an_aof_there_is_no_fsync_to_wait_for(redis_url: str, pg_dsn: str) -> None:
    assert "cmdstat_waitaof" not in asyncio.run(archive_three_pages(redis_url, pg_dsn))


def test_every_connected_replica_has_the_pages_before_the_archive_commits_them(
    tmp_path: Path, pg_dsn: str
) -> None:
    """With --min-insync-replicas 1 (no replica asked of appends) the archiver still waits
    for every connected replica: one Sentinel promotes must not lack what the archive
    holds, or it would hand those offsets out again. A stalled replica holds archiving
    back (told as a problem); the pages go once it has them."""
    primary = RedisServer(tmp_path / "primary", extra_args=["--repl-diskless-sync-delay", "0"])
    replica = RedisServer(
        tmp_path / "replica", extra_args=["--replicaof", "127.0.0.1", str(primary.port)]
    )

    async def scenario() -> None:
        log = make_log(primary.url)
        deadline = time.monotonic() + 30
        while (await log.redis.info("replication")).get("slave0", {}).get("state") != "online":
            assert time.monotonic() < deadline, "the replica never synced"
            await asyncio.sleep(0.05)
        assert await log.redis.execute_command("WAIT", 1, 30_000) == 1  # and has loaded
        await log.create_topic(TopicConfig("t", 1, page_size=2))
        for i in range(3):
            await produce(log, "t", 0, [b"%d" % i, b"x"])
        pool = await create_pool(pg_dsn)
        archiver = Archiver(log, pool, idle_close_ms=0, replica_timeout=0.3)
        replica.proc.send_signal(signal.SIGSTOP)
        try:
            summary = await archiver.run_once()
        finally:
            replica.proc.send_signal(signal.SIGCONT)
        assert summary.rows == 0 and await archived_rows(pg_dsn) == []
        [problem] = summary.problems
        assert "did not confirm" in problem and "at 1 replica" in problem, problem
        archiver.replica_timeout = 4.0  # a resumed replica acknowledges within a second
        summary = await archiver.run_once()
        assert (summary.rows, summary.problems) == (6, [])
        await pool.close()

    try:
        asyncio.run(scenario())
    finally:
        replica.stop()
        primary.stop()


def test_out_of_range_timestamps(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        log = make_log(redis_url)
        await log.create_topic(TopicConfig("t", 1, page_size=1))
        stamps = [-1, 0, 2**62, -(2**62), 253402300799999]
        await produce(log, "t", 0, [b"v"] * len(stamps), timestamps=stamps)
        pool = await create_pool(pg_dsn)
        await Archiver(log, pool, idle_close_ms=0).run_once()
        got = [r.timestamp for r in await archived_rows(pg_dsn)]
        assert got == [-1, 0, -1, -1, 253402300799999]  # unrepresentable: NULL, read as -1
        await pool.close()

    asyncio.run(scenario())


def test_schema_is_created_once_under_concurrency(pg_dsn: str) -> None:
    async def scenario() -> None:
        conns = [await asyncpg.connect(pg_dsn) for _ in range(5)]
        versions = await asyncio.gather(*(ensure_schema(c) for c in conns))
        assert versions == [SCHEMA_VERSION] * 5
        assert await conns[0].fetchval("SELECT count(*) FROM schema_version") == SCHEMA_VERSION
        assert await ensure_schema(conns[0]) == SCHEMA_VERSION  # idempotent
        await conns[0].execute("INSERT INTO schema_version (version) VALUES (999)")
        with pytest.raises(ArchiveError, match="newer"):
            await ensure_schema(conns[1])
        for c in conns:
            await c.close()

    asyncio.run(scenario())


def test_pool_without_the_codec_is_refused(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        pool = await asyncpg.create_pool(pg_dsn, min_size=0)
        with pytest.raises(ArchiveError, match="create_pool"):
            await Archiver(make_log(redis_url), pool).run_once()
        await pool.close()

    asyncio.run(scenario())


def test_status_of_an_empty_database(pg_dsn: str) -> None:
    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        st = await status(pool)
        assert (st.schema_version, st.watermark, st.partitions) == (0, 0, [])
        assert await watermark(pool) == 0
        reader = ArchiveReader(pool)
        assert await reader.start_offset("t", 0) is None
        assert await reader.read("t", 0, 0, 1000) == []
        await pool.close()

    asyncio.run(scenario())


def test_recorded_passes_skip_idle_ones_and_keep_the_newest(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass is recorded when it archived rows or moved the watermark, never when idle;
    the table keeps only the newest KEEP rows."""
    monkeypatch.setattr(archive_passes, "KEEP", 3)

    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        try:
            await ensure_schema(pool)
            assert not await archive_passes.record(pool, 0.5, 0, 0, 0)  # idle, first ever
            assert await archive_passes.record(pool, 0.5, 0, 0, 7)  # a gap moved the mark
            assert not await archive_passes.record(pool, 0.5, 0, 0, 7)  # idle again
            for n in range(1, 5):
                assert await archive_passes.record(pool, 2.0, n * 10, n * 100, 7 + n)
            kept = await archive_passes.recent(pool)
            assert [(p.rows, p.bytes, p.watermark) for p in kept] == [
                (40, 400, 11),
                (30, 300, 10),
                (20, 200, 9),
            ]
            assert kept[0].rows_per_second == pytest.approx(20.0, rel=0.01)
            assert await fetchval(pg_dsn, "SELECT count(*) FROM archive_pass") == 3
        finally:
            await pool.close()

    asyncio.run(scenario())
