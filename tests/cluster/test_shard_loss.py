"""A shard of the cluster that loses its data (restarted without persistence or replica)
while the catalog, on another shard, still lists its partitions: the partitions it held
must not start again from offset 0 under consumers' feet."""

from __future__ import annotations

import asyncio

import pytest

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import KafkaesqueError
from kafkaesque.hot.connect import redis_client
from kafkaesque.hot.log import Log
from kafkaesque.hot.slots import slot_of
from kafkaesque.records.build import build_batch
from tests.cluster_servers import ClusterServers


def test_a_shard_that_lost_its_data_reuses_no_offset(empty_cluster: ClusterServers) -> None:
    async def scenario() -> None:
        client = redis_client(empty_cluster.cluster_url)
        log = Log(client)
        await log.create_topic(TopicConfig("s", 6))
        for p in range(6):
            await log.append("s", p, [build_batch([b"a", b"b"])])
        catalog = empty_cluster.owner(client.keyslot(log.keys.topics))
        lost = next(p for p in range(6) if empty_cluster.owner(slot_of("s", p)) is not catalog)
        empty_cluster.owner(slot_of("s", lost)).client().flushall()  # its shard forgets
        with pytest.raises(KafkaesqueError):
            await log.append("s", lost, [build_batch([b"new"])])
        with pytest.raises(KafkaesqueError):
            await log.read("s", lost, 0)
        # The other partitions go on where they were.
        others = [
            p
            for p in range(6)
            if empty_cluster.owner(slot_of("s", p)) is not empty_cluster.owner(slot_of("s", lost))
        ]
        for p in others:
            appended = await log.append("s", p, [build_batch([b"c"])])
            assert appended.base_offsets == [2]
        await client.aclose()

    asyncio.run(scenario())
