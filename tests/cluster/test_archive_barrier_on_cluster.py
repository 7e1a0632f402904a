"""The archiver's barrier on a Redis Cluster: a chunk is committed to the archive only once
every replica of the partition's shard in sync has its pages, at least
--min-insync-replicas - 1 of them (the wait runs on the shard's primary): a replica the
cluster promotes must not lack what the archive holds, or it would hand those offsets out
again, and the archive would never take the new records."""

from __future__ import annotations

import asyncio
import signal

import pytest

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.connect import redis_client
from kafkaesque.hot.log import Log
from kafkaesque.hot.slots import slot_of
from kafkaesque.records.build import build_batch
from storage_pg import Archiver, create_pool, ensure_schema
from tests.cluster_servers import ClusterServers


def replica_of(cluster: ClusterServers, topic: str, partition: int):
    owner = cluster.owner(slot_of(topic, partition))
    [replica] = [
        r
        for r in cluster.replicas
        if r.client().info("replication").get("master_port") == owner.port
    ]
    return replica


async def produce_pages(log: Log, topic: str) -> None:
    await log.create_topic(TopicConfig(topic, 1, page_size=2))
    for i in range(3):
        await log.append(topic, 0, [build_batch([b"%d" % i, b"x"])])


@pytest.mark.parametrize("replicas", [0, 1])
def test_a_stalled_shard_replica_holds_archiving_back(
    replicated_cluster: ClusterServers, pg_dsn: str, replicas: int
) -> None:
    """The default (--min-insync-replicas 1, replicas=0) and --min-insync-replicas 2: a
    stopped replica of the partition's shard holds its pages back; once it runs again
    they are archived."""
    topic = f"barrier{replicas}"

    async def scenario() -> None:
        log = Log(redis_client(replicated_cluster.cluster_url))
        await produce_pages(log, topic)
        pool = await create_pool(pg_dsn)
        await ensure_schema(pool)
        archiver = Archiver(
            log, pool, idle_close_ms=0, compact=False, replicas=replicas, replica_timeout=0.3
        )
        replica = replica_of(replicated_cluster, topic, 0)
        replica.process.proc.send_signal(signal.SIGSTOP)
        try:
            summary = await archiver.run_once()
        finally:
            replica.process.proc.send_signal(signal.SIGCONT)
        rows = await pool.fetchval("SELECT count(*) FROM record WHERE topic = $1", topic)
        assert rows == 0, f"{rows} rows archived that the shard's replica may lack ({summary})"
        assert "did not confirm" in summary.problems[0], summary.problems
        archiver.replica_timeout = 4.0  # a resumed replica acknowledges within a second
        summary = await archiver.run_once()
        assert (summary.rows, summary.problems) == (6, [])
        await pool.close()

    asyncio.run(scenario())
