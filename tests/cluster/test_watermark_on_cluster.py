"""The archive watermark on a Redis Cluster (docs/scale-out.md 3.5): once published, no
record with an id at or below it is archived later, whatever appends run meanwhile, on
every shard, with brokers' clocks apart, and whatever the archiver's pass meets between
its steps."""

from __future__ import annotations

import asyncio
import itertools
import time

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.connect import redis_client
from kafkaesque.hot.log import Log
from kafkaesque.hot.sequence import counter_of
from kafkaesque.hot.slots import slot_of
from kafkaesque.records.build import build_batch
from storage_pg import Archiver, create_pool, ensure_schema
from tests.cluster_servers import ClusterServers


async def archived_ids(pool) -> set[int]:
    return {r["id"] for r in await pool.fetch("SELECT id FROM record")}


async def watermark(pool) -> int:
    return await pool.fetchval("SELECT id FROM archive_watermark")


def shifted_log(url: str, skew_ms: int) -> Log:
    """A Log whose clock is ``skew_ms`` off (its appends' floors follow it)."""
    log = Log(redis_client(url))

    sequencing = log.appends.sequencing

    def shifted(topic: str, partition: int, now: int):
        return sequencing(topic, partition, now + skew_ms)

    log.appends.sequencing = shifted  # type: ignore[method-assign]
    return log


def test_no_id_archived_at_or_below_an_earlier_watermark(
    empty_cluster: ClusterServers, pg_dsn: str
) -> None:
    async def scenario() -> None:
        url = empty_cluster.cluster_url
        log = Log(redis_client(url))
        await log.create_topic(TopicConfig("w", 6, page_size=5))
        assert len({empty_cluster.owner(slot_of("w", p)).node_id for p in range(6)}) == 3
        pool = await create_pool(pg_dsn)
        await ensure_schema(pool)
        archiver = Archiver(log, pool, idle_close_ms=0)
        # Three brokers: one on time, one 10 s behind, one 10 s ahead.
        brokers = [shifted_log(url, skew) for skew in (0, -10_000, 10_000)]
        stop = asyncio.Event()

        async def appender(broker: Log, partition: int) -> None:
            i = 0
            while not stop.is_set():
                await broker.append("w", partition, [build_batch([b"%d" % i, b"x"])])
                i += 1
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(appender(brokers[p % 3], p)) for p in range(6)]
        published: list[tuple[int, set[int]]] = []
        deadline = time.monotonic() + 4
        try:
            while time.monotonic() < deadline:
                summary = await archiver.run_once()
                published.append((summary.watermark, await archived_ids(pool)))
        finally:
            # The appenders stop on their own, also when a pass fails: a cancellation
            # can be lost in redis-py's wait_for (Python 3.11), and asyncio.run would
            # then wait for them for ever.
            stop.set()
            await asyncio.gather(*tasks)
        for _ in range(3):
            await archiver.run_once()
        final = await archived_ids(pool)
        published.append((await watermark(pool), final))
        assert len(published) >= 3 and len(final) > 100
        # Every record appended is archived, and none came after a watermark above it.
        for (mark, before), (_, after) in itertools.pairwise(published):
            late = {i for i in after - before if i <= mark}
            assert late == set(), (mark, sorted(late)[:5])
        # The watermark reaches the records of the brokers on time and behind; those of the
        # one 10 s ahead only once the catalog's clock passes theirs.
        on_time = await pool.fetchval('SELECT max(id) FROM record WHERE "partition" % 3 != 2')
        assert published[-1][0] >= on_time
        assert published[-1][0] < max(final)
        for broker in brokers:
            await broker.redis.aclose()
        await pool.close()
        await log.redis.aclose()

    asyncio.run(scenario())


def test_hazards_between_the_passes_steps(empty_cluster: ClusterServers, pg_dsn: str) -> None:
    """A topic created between the tick and the listing; a broker whose floor was
    computed before a pass and whose script runs after it: both get ids above it."""

    async def scenario() -> None:
        url = empty_cluster.cluster_url
        log = Log(redis_client(url))
        other = Log(redis_client(url))
        await log.create_topic(TopicConfig("h", 3, page_size=2))
        for p in range(3):
            await log.append("h", p, [build_batch([b"a", b"b", b"c"])])
        pool = await create_pool(pg_dsn)
        await ensure_schema(pool)
        archiver = Archiver(log, pool, idle_close_ms=0)
        await archiver.run_once()
        # A broker computes an append's floor, then stalls for a whole pass.
        keys, args = other.appends._append_call("h", 1, [build_batch([b"late"])])
        real_tick = log.tick

        async def tick_then_create() -> int:
            tick = await real_tick()
            await other.create_topic(TopicConfig("new", 2))
            await other.append("new", 1, [build_batch([b"n"])])
            return tick

        log.tick = tick_then_create  # type: ignore[method-assign]
        mark = (await archiver.run_once()).watermark
        log.tick = real_tick  # type: ignore[method-assign]
        new_id = await log.sequence_at("new", 1, 0)
        assert new_id > mark
        _start, last, _epoch, base = await other.scripts.append(keys=keys, args=args)
        late_id = await log.sequence_at("h", 1, base)
        assert late_id > mark and counter_of(late_id) == last
        await archiver.run_once()
        assert {new_id, late_id} <= await archived_ids(pool)
        await pool.close()
        for lg in (log, other):
            await lg.redis.aclose()

    asyncio.run(scenario())


def test_two_archivers_share_the_partitions(empty_cluster: ClusterServers, pg_dsn: str) -> None:
    """Two archivers (two machines' cron jobs) at once on a cluster: each takes the
    partitions the other does not hold; every record is archived exactly once."""

    async def scenario() -> None:
        url = empty_cluster.cluster_url
        log = Log(redis_client(url))
        await log.create_topic(TopicConfig("shared", 6, page_size=4))
        appended = 0
        for round_ in range(10):
            for p in range(6):
                await log.append("shared", p, [build_batch([b"%d" % round_, b"y"])])
                appended += 2
        pools = [await create_pool(pg_dsn) for _ in range(2)]
        await ensure_schema(pools[0])
        logs = [Log(redis_client(url)) for _ in range(2)]
        archivers = [
            Archiver(lg, pool, idle_close_ms=0, pages_per_transaction=1)
            for lg, pool in zip(logs, pools, strict=True)
        ]
        summaries = await asyncio.gather(*(a.run_once() for a in archivers))
        rest = await archivers[0].run_once()  # what one skipped while the other held it
        rows = sum(s.rows for s in summaries) + rest.rows
        assert rows == appended == await pools[0].fetchval("SELECT count(*) FROM record")
        assert all(s.rows > 0 for s in summaries) or any(s.busy for s in summaries)
        assert (await archivers[1].run_once()).rows == 0
        for lg, pool in zip([*logs, log], [*pools, None], strict=True):
            await lg.redis.aclose()
            if pool is not None:
                await pool.close()

    asyncio.run(scenario())
