"""The key layout's two forms and the per-slot tags (docs/scale-out.md 2.1, 2.2)."""

from __future__ import annotations

import itertools

from redis.crc import key_slot

from kafkaesque.hot.keys import Keys
from kafkaesque.hot.slots import SLOTS, hash_slot, slot_of, tag, tags


def _catalog_keys(k: Keys) -> list[str]:
    return [
        k.topics,
        k.topic("orders"),
        k.topic_defaults,
        k.cluster_id,
        k.producer_ids,
        k.incarnation,
        k.archiving,
        k.groups,
        k.groups_active,
        k.consumer_groups_active,
        k.quotas,
        k.quotas_version,
        k.acls,
        k.acls_version,
        k.transactions,
        k.transactions_due,
        k.scram_credentials,
        k.sequence_floor,
        k.creating("orders"),
        k.configuring("orders"),
        k.deleting("orders"),
    ]


def test_single_redis_names_are_unchanged() -> None:
    k = Keys()
    assert (k.topics, k.topic("t"), k.gseq, k.archiving, k.incarnation) == (
        "ks:topics",
        "ks:topic:t",
        "ks:gseq",
        "ks:archiving",
        "ks:incarnation",
    )
    assert k.partition("t", 3).meta == "ks:{t:3}:meta"
    assert k.group("g", ":offsets") == "ks:group:{g}:offsets"
    assert Keys("x").quotas_version == "x:quotas:version"


def test_cluster_catalog_keys_share_one_slot() -> None:
    for ns in ("ks", "lay"):
        k = Keys(ns, cluster=True)
        assert k.topics == f"{ns}:{{{ns}}}:topics"
        catalog = _catalog_keys(k)
        assert {key_slot(key.encode()) for key in catalog} == {hash_slot(ns)}
        # Partition and group keys keep their own tags; channels are no keys.
        assert k.partition("t", 0).meta == f"{ns}:{{t:0}}:meta"
        assert k.appended("t") == Keys(ns).appended("t")


def test_slot_tags_hash_to_their_slot() -> None:
    table = tags()
    assert len(table) == SLOTS and len(set(table)) == SLOTS
    assert max(map(len, table)) <= 4
    for slot, text in enumerate(table):
        assert key_slot(Keys(cluster=True).slot_hash(slot).encode()) == slot, text
        assert ":" not in text and "{" not in text and "}" not in text
    assert tags() is table  # built once


def test_partition_slot_is_its_keys_slot() -> None:
    k = Keys(cluster=True)
    for topic, partition in itertools.product(("orders", "a.b-c_d", "x" * 200), range(20)):
        slot = slot_of(topic, partition)
        p = k.partition(topic, partition)
        for key in (p.meta, p.index, p.page(7), p.batch_index(7)):
            assert key_slot(key.encode()) == slot
        assert key_slot(k.slot_hash(slot).encode()) == slot
        assert tag(slot) == tags()[slot]


def test_patterns_in_both_modes() -> None:
    single, cluster = Keys("lay"), Keys("lay", cluster=True)
    assert "gseq" in single.patterns() and "slot_hash" not in single.patterns()
    patterns = cluster.patterns()
    assert "gseq" not in patterns
    for key in [*_catalog_keys(cluster), cluster.slot_hash(5), cluster.partition("t", 1).meta]:
        assert any(p.match(key) for p in patterns.values()), key
    # One layout's catalog names do not pass for the other's.
    assert not any(p.match(single.topics) for p in patterns.values())
    assert not any(p.match(cluster.topics) for p in single.patterns().values())
