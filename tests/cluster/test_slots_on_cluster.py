"""The per-slot tags and the catalog tag, against the server's own CLUSTER KEYSLOT."""

from __future__ import annotations

from kafkaesque.hot.keys import Keys
from kafkaesque.hot.slots import SLOTS, slot_of, tags
from tests.cluster_servers import ClusterServers


def test_every_tag_hashes_to_its_slot_on_the_server(cluster: ClusterServers) -> None:
    node = cluster.primaries[0].client()
    k = Keys(cluster=True)
    pipe = node.pipeline(transaction=False)
    for slot in range(SLOTS):
        pipe.execute_command("CLUSTER", "KEYSLOT", k.slot_hash(slot))
    assert pipe.execute() == list(range(SLOTS))
    assert len(tags()) == SLOTS


def test_catalog_and_partitions_on_the_server(cluster: ClusterServers) -> None:
    node = cluster.primaries[0].client()
    k = Keys(cluster=True)
    catalog = {node.execute_command("CLUSTER", "KEYSLOT", key) for key in (k.topics, k.topic("t"))}
    assert len(catalog) == 1
    for partition in range(8):
        meta = k.partition("orders", partition).meta
        assert node.execute_command("CLUSTER", "KEYSLOT", meta) == slot_of("orders", partition)
