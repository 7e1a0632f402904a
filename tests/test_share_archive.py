"""Share groups' share-partitions in the archive: the archiver copies them, and after Redis
loses its data recovery gives them back (accepted records stay accepted, acquired ones come
back AVAILABLE with their delivery counts, a start past the restored log end comes back at
the end)."""

from __future__ import annotations

import asyncio

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.groups.share.config import ShareGroupConfig
from kafkaesque.groups.share.coordinator import ShareGroupCoordinator
from kafkaesque.groups.share.state import ShareHeartbeat
from storage_pg import Archiver, create_pool, recover
from tests.storage.common import make_log, produce

CONFIG = ShareGroupConfig(
    record_lock_duration_ms=30_000, delivery_count_limit=5, max_record_locks=100
)


def test_share_partitions_come_back_after_redis_loses_its_data(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        log = make_log(redis_url)
        await log.enable_archiving()
        await log.create_topic(TopicConfig("q", 2, page_size=4))
        await produce(log, "q", 0, [b"x"] * 8)
        await produce(log, "q", 1, [b"y"] * 2)
        coordinator = ShareGroupCoordinator(log)
        store = coordinator.store
        await coordinator.heartbeat("g", ShareHeartbeat("m", 0, topics=["q"]))
        for p in (0, 1):
            await store.prepare("g", ("q", p), 0, CONFIG, 0, 0, 8)
        await store.acquire("g", ("q", 0), "m", 0, CONFIG, 8, [(0, 7, True)])
        await store.acknowledge("g", ("q", 0), "m", 1, CONFIG, [(0, 3, [1])])
        await store.acquire("g", ("q", 1), "m", 0, CONFIG, 8, [(0, 1, True)])
        await store.acknowledge("g", ("q", 1), "m", 1, CONFIG, [(0, 1, [1])])
        await Archiver(log, pool, idle_close_ms=0).run_once()
        # After the pass: accepted in Redis only, lost with it (delivered again).
        await store.acknowledge("g", ("q", 0), "m", 2, CONFIG, [(4, 4, [1])])

        await log.redis.flushall()
        assert await recover(log, pool)
        states = await store.states("g", [("q", 0), ("q", 1)], with_records=True)
        q0 = states[("q", 0)]
        assert (q0.start, q0.end, q0.acquired, q0.available) == (4, 8, 0, 4)
        assert q0.records == {o: "a1" for o in range(4, 8)}  # delivered once, available
        assert q0.totals["accepted"] == 4
        assert (await log.state("q", 1)).log_end == 2  # every record of q[1] accepted
        assert (states[("q", 1)].start, states[("q", 1)].end) == (2, 2)
        group = await coordinator.load("g")
        assert group is not None and not group.members  # members join again
        # A new member gets the records back, their second delivery.
        await coordinator.heartbeat("g", ShareHeartbeat("n", 0, topics=["q"]))
        runs = await store.acquire("g", ("q", 0), "n", 5, CONFIG, 8, [(4, 7, True)])
        assert runs == [(4, 7, 2)]
        await pool.close()

    asyncio.run(scenario())
