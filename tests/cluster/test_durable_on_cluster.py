"""acks=all on a Redis Cluster: the append and its WAIT on a connection to the node serving
the partition (HotTierCluster.for_key), also after its slot moved."""

from __future__ import annotations

import asyncio

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.connect import HotTierCluster, redis_client
from kafkaesque.hot.durability import Durability
from kafkaesque.hot.log import Log
from kafkaesque.hot.slots import slot_of
from kafkaesque.records.build import build_batch
from tests.cluster_servers import ClusterServers


def test_acks_all_waits_for_the_shards_replica(replicated_cluster: ClusterServers) -> None:
    replicated_cluster.flushall()

    async def scenario() -> None:
        client = redis_client(replicated_cluster.cluster_url)
        assert isinstance(client, HotTierCluster)
        log = Log(client)
        await log.create_topic(TopicConfig("d", 6))
        owners = {replicated_cluster.owner(slot_of("d", p)).node_id for p in range(6)}
        assert len(owners) >= 2  # the partitions spread over the shards
        for p in range(6):
            appended = await log.append(
                "d", p, [build_batch([b"v%d" % p])], durability=Durability(replicas=1)
            )
            assert appended.base_offsets == [0]
        for p in range(6):
            assert (await log.read("d", p, 0)).log_end == 1
        await client.aclose()

    asyncio.run(scenario())


class Recorded:
    """A durability whose wait only notes the port of the connection it is given."""

    waits = True
    replicas = 0  # none required: no replica check before the append

    def __init__(self) -> None:
        self.ports: list[int] = []

    async def wait(self, connection, timeout_ms: int) -> None:
        await connection.execute_command("WAIT", 0, 100)
        self.ports.append(connection.connection.port)


def test_durable_append_follows_a_moved_slot(empty_cluster: ClusterServers) -> None:
    async def scenario() -> None:
        client = redis_client(empty_cluster.cluster_url)
        log = Log(client)
        await log.create_topic(TopicConfig("m", 1))
        recorded = Recorded()
        await log.append("m", 0, [build_batch([b"a"])], durability=recorded)
        slot = slot_of("m", 0)
        source = empty_cluster.owner(slot)
        assert recorded.ports == [source.port]
        target = next(n for n in empty_cluster.primaries if n is not source)
        empty_cluster.reshard(slot, target)
        empty_cluster.wait_ok()
        # The client's slot map still names the source: MOVED, the map read again, and the
        # append and its wait on the target.
        appended = await log.append("m", 0, [build_batch([b"b"])], durability=recorded)
        assert appended.base_offsets == [1]
        assert recorded.ports == [source.port, target.port]
        assert (await log.read("m", 0, 0)).log_end == 2
        await client.aclose()

    asyncio.run(scenario())
