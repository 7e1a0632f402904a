"""Compaction beside the archive, on a real redis-server and PostgreSQL: the archive keeps
the full history, Redis the compacted log, and reads below Redis' start get the archive's
compacted view."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import redis.asyncio

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.compaction import Compactor
from kafkaesque.hot.log import Log
from kafkaesque.records.batch import decode_batch
from kafkaesque.records.build import build_batch
from storage_pg import Archiver, create_pool, status
from storage_pg.tiered import Archive, attach
from tests.log_reads import read_rows
from tests.storage.common import archived_rows, fetchval, make_log

TS = 1_700_000_000_000
HOUR = 3_600_000
Pair = tuple[bytes | None, bytes | None]


def keyed(pairs: Sequence[Pair]) -> bytes:
    return build_batch([v for _, v in pairs], [k for k, _ in pairs], timestamp=TS)


def compact(name: str, **configs: str) -> TopicConfig:
    settings = {"cleanup.policy": "compact", "kafkaesque.page.size": "4"}
    settings.update({k.replace("_", "."): v for k, v in configs.items()})
    return TopicConfig(name, 1, configs=settings)


# Pages of 4: [a b a c] [a(tombstone) d e f] [g h d b] and the open page [z].
HISTORY: list[list[Pair]] = [
    [(b"a", b"a1"), (b"b", b"b1")],
    [(b"a", b"a2"), (b"c", b"c1")],
    [(b"a", None), (b"d", b"d1"), (b"e", b"e1"), (b"f", b"f1")],
    [(b"g", b"g1"), (b"h", b"h1"), (b"d", b"d2"), (b"b", b"b2")],
    [(b"z", b"open")],
]
LATEST = [(3, b"c", b"c1"), (4, b"a", None), (6, b"e", b"e1"), (7, b"f", b"f1")]
LATEST += [(8, b"g", b"g1"), (9, b"h", b"h1"), (10, b"d", b"d2"), (11, b"b", b"b2")]
LATEST += [(12, b"z", b"open")]


async def produce_history(log: Log, topic: str) -> None:
    for pairs in HISTORY:
        await log.append(topic, 0, [keyed(pairs)])


def test_the_archive_keeps_every_record_and_redis_the_latest(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        log = make_log(redis_url)
        pool = await create_pool(pg_dsn)
        await log.create_topic(compact("kv"))
        await produce_history(log, "kv")
        archiver = Archiver(log, pool, idle_close_ms=None)
        summary = await archiver.run_once()  # archives, then compacts what it archived
        assert summary.rows == 12
        [compacted] = summary.compacted
        assert compacted.total("records_before") == 12 and compacted.total("records_after") == 8
        # The archive has the full history, ids and all; Redis the compacted log.
        rows = await archived_rows(pg_dsn)
        assert [(r.offset, r.key, r.value) for r in rows] == [
            (i, k, v) for i, (k, v) in enumerate(p for pairs in HISTORY[:4] for p in pairs)
        ]
        assert await read_rows(log, "kv", max_bytes=150) == LATEST
        # Nothing taken for a gap or a loss: no dropped range, the watermark at the end.
        await archiver.run_once()
        state = await status(pool)
        assert state.dropped == [] and state.lost == []
        await log.append("kv", 0, [keyed([(b"y", b"1"), (b"x", b"1"), (b"w", b"1")])])
        summary = await archiver.run_once()
        assert summary.rows == 4 and summary.watermark == await log.sequence_counter()
        assert summary.gaps == [] and summary.problems == []
        await pool.close()
        await log.redis.aclose()

    asyncio.run(scenario())


def test_unarchived_pages_wait_for_the_archiver(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        log = make_log(redis_url)
        pool = await create_pool(pg_dsn)
        await log.enable_archiving()
        await log.create_topic(compact("wait"))
        await produce_history(log, "wait")
        [idle] = await Compactor(log).run_once(force=True)
        assert not idle.compacted and len(await read_rows(log, "wait", max_bytes=150)) == 13
        await Archiver(log, pool, idle_close_ms=None, compact=False).run_once()
        [done] = await Compactor(log).run_once()
        assert done.compacted and await read_rows(log, "wait", max_bytes=150) == LATEST
        await pool.close()
        await log.redis.aclose()

    asyncio.run(scenario())


def test_cold_reads_of_a_compact_topic_are_compacted(redis_url: str, pg_dsn: str) -> None:
    """Once Redis let the archived pages go (memory short, or a restore), reads below its
    start come from the archive's compacted view: never a value a tombstone deleted, even
    after compaction removed the tombstone from Redis."""

    async def scenario() -> None:
        archive = Archive(pg_dsn)
        log = attach(make_log(redis_url), archive)
        await log.create_topic(compact("cold", delete_retention_ms=str(HOUR)))
        await produce_history(log, "cold")
        archiver = Archiver(log, await archive.pool(), idle_close_ms=None, compact=False)
        await archiver.run_once()
        await Compactor(log, clock=lambda: TS + 1000 * HOUR).run_once()
        # The tombstone's time is up: Redis forgets a.
        await Compactor(log, clock=lambda: TS + 1001 * HOUR).run_once()
        assert [k for _, k, _ in await read_rows(log, "cold", max_bytes=150)] == [
            b"c", b"e", b"f", b"g", b"h", b"d", b"b", b"z"
        ]  # fmt: skip
        await log.release_archived()  # every archived page leaves Redis
        assert (await log.state("cold", 0)).log_start == 12
        got = await read_rows(log, "cold", max_bytes=150)
        # The archive's latest per key, tombstone included (safe: it deletes what it hides).
        assert got == LATEST
        # Rebuilt batches skip offsets, as a compacted Kafka log's do.
        first = (await log.read("cold", 0, 0, max_bytes=1 << 20)).batches[0]
        assert [r.offset for r in decode_batch(first)][:3] == [3, 4, 6]

        # A plain topic's cold reads still serve every record.
        await log.create_topic(TopicConfig("plain", 1, page_size=4))
        await produce_history(log, "plain")
        await archiver.run_once()
        await log.release_archived()
        assert len(await read_rows(log, "plain", max_bytes=150)) == 13
        await archive.close()
        await log.redis.aclose()

    asyncio.run(scenario())


def test_a_topic_made_compact_gets_its_archived_keys(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        archive = Archive(pg_dsn)
        log = attach(make_log(redis_url), archive)
        await log.create_topic(TopicConfig("later", 1, page_size=4))
        await produce_history(log, "later")
        archiver = Archiver(log, await archive.pool(), idle_close_ms=None)
        await archiver.run_once()
        assert await fetchval(pg_dsn, "SELECT count(*) FROM compact_key") == 0

        await log.configure_topic(
            "later", lambda c: c.replace(configs={**c.configs, "cleanup.policy": "compact"})
        )
        await archiver.run_once()  # nothing new to archive, but the keys are caught up
        assert await fetchval(pg_dsn, "SELECT count(*) FROM compact_key") == 8
        await log.release_archived()
        assert await read_rows(log, "later", max_bytes=150) == LATEST

        # Back to delete: the view goes, cold reads serve the history again.
        await log.configure_topic(
            "later", lambda c: c.replace(configs={**c.configs, "cleanup.policy": "delete"})
        )
        await archiver.run_once()
        assert await fetchval(pg_dsn, "SELECT count(*) FROM compact_key") == 0
        assert len(await read_rows(log, "later", max_bytes=150)) == 13

        await log.delete_topic("later")
        assert await fetchval(pg_dsn, "SELECT count(*) FROM compact_key") == 0
        await archive.close()
        await log.redis.aclose()

    asyncio.run(scenario())


def test_compacted_before_archiving_is_no_gap(redis_url: str, pg_dsn: str) -> None:
    """Compaction without an archive, then one: the records compaction removed are simply
    not archived; nothing is recorded as dropped and the watermark reaches the end."""

    async def scenario() -> None:
        log = make_log(redis_url)
        await log.create_topic(compact("early"))
        await produce_history(log, "early")
        await Compactor(log).run_once()  # page 0 empties: page 1 takes over offset 0
        pool = await create_pool(pg_dsn)
        summary = await Archiver(log, pool, idle_close_ms=0).run_once()
        assert summary.gaps == [] and summary.problems == []
        assert summary.watermark == await log.sequence_counter()
        rows = await archived_rows(pg_dsn)
        assert [(r.offset, r.key, r.value) for r in rows] == LATEST
        # Ids are the ones the records were given when appended.
        assert [r.id for r in rows] == [r.offset + 1 for r in rows]
        assert (await status(pool)).dropped == []
        await pool.close()
        await log.redis.aclose()

    asyncio.run(scenario())


def test_archiver_and_compactor_side_by_side(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        log = make_log(redis_url)
        pool = await create_pool(pg_dsn)
        await log.enable_archiving()  # as serve does before it accepts an append
        await log.create_topic(compact("busy"))
        archiver = Archiver(log, pool, idle_close_ms=None, compact=False)
        compactor = Compactor(log)
        keys = [b"k%d" % i for i in range(7)]
        expected: dict[bytes | None, bytes | None] = {}
        stop = asyncio.Event()

        async def produce() -> None:
            for r in range(60):
                pairs = [(k, b"%d" % r) for k in keys[:3]] + [(keys[3 + r % 4], b"%d" % r)]
                await log.append("busy", 0, [keyed(pairs[:3])])
                await log.append("busy", 0, [keyed(pairs[3:])])
                expected.update(pairs)
            stop.set()

        async def loop(step) -> None:  # type: ignore[no-untyped-def]
            while not stop.is_set():
                await step()
                await asyncio.sleep(0)

        await asyncio.gather(
            produce(), loop(archiver.run_once), loop(lambda: compactor.run_once(force=True))
        )
        await archiver.run_once()
        await compactor.run_once(force=True)
        # The archive got every record once (the 60 rounds filled 60 pages, all closed).
        rows = await archived_rows(pg_dsn)
        assert [r.offset for r in rows] == list(range(240))
        # Redis: the latest value of every key, and each key once.
        held = await read_rows(log, "busy", max_bytes=150)
        assert {k: v for _, k, v in held} == expected
        assert len(held) == len(keys)
        await pool.close()
        await log.redis.aclose()

    asyncio.run(scenario())


def test_recovery_restores_a_compact_topic_readable_compacted(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        archive = Archive(pg_dsn)
        log = attach(make_log(redis_url), archive)
        await log.create_topic(compact("lost"))
        await produce_history(log, "lost")
        await Archiver(log, await archive.pool(), idle_close_ms=None).run_once()
        await log.redis.flushall()  # Redis loses everything
        fresh = attach(Log(redis.asyncio.Redis.from_url(redis_url)), archive)
        await fresh.ensure_recovered()
        # The open page was not archived.
        assert await read_rows(fresh, "lost", max_bytes=150) == LATEST[:-1]
        await archive.close()
        await log.redis.aclose()
        await fresh.redis.aclose()

    asyncio.run(scenario())
