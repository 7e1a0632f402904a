"""The Redis layout cannot drift undocumented: after a scenario that touches every part of
the log (topics, appends, idempotent producers, groups, the archive, compaction, a restore,
deletion, DeleteRecords), every key in a real redis-server matches kafkaesque/hot/keys.py's
patterns."""

from __future__ import annotations

import asyncio

import msgpack

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.groups.consumer import ConsumerGroupCoordinator
from kafkaesque.groups.consumer_state import Heartbeat
from kafkaesque.groups.coordinator import CoordinatorConfig, GroupCoordinator
from kafkaesque.groups.share.config import ShareGroupConfig
from kafkaesque.groups.share.coordinator import ShareGroupCoordinator
from kafkaesque.groups.share.state import ShareHeartbeat
from kafkaesque.groups.state import JoinRequest
from kafkaesque.hot.acl_store import AclStore
from kafkaesque.hot.cluster_id import cluster_id
from kafkaesque.hot.credentials import CredentialStore
from kafkaesque.hot.failover import EpochBump
from kafkaesque.hot.keys import PARTITION, Keys
from kafkaesque.hot.log import Log
from kafkaesque.hot.log_types import RestoredPartition, RestoredTopic
from kafkaesque.hot.quota_store import QuotaStore
from kafkaesque.hot.registry import BrokerInfo, Registry
from kafkaesque.partition.layer import Partitions
from kafkaesque.records.build import build_batch
from kafkaesque.security.acls import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from kafkaesque.security.quotas import check_alteration
from kafkaesque.security.scram import SCRAM_SHA_512, new_credential
from kafkaesque.txn.coordinator import TransactionCoordinator
from storage_pg import Archiver, create_pool, ensure_schema
from tests.storage.common import make_log, produce


async def all_keys(redis) -> list[str]:
    return sorted([k.decode() async for k in redis.scan_iter(count=1000)])


def unmatched(keys: list[str], patterns: dict) -> list[str]:
    return [k for k in keys if not any(p.match(k) for p in patterns.values())]


def test_every_key_matches_the_documented_layout(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        log = make_log(redis_url, namespace="lay")
        keys = Keys("lay")
        await cluster_id(log.redis, "lay")
        await log.create_topic(TopicConfig("t.1", 2, page_size=3, ttl=3600))
        await log.create_topic(TopicConfig("gone", 1, page_size=2))
        for p in (0, 1):
            await produce(log, "t.1", p, [b"v%d" % i for i in range(4)])
        await produce(log, "t.1", 0, [b"a", b"b"], producer=(await log.new_producer_id(), 0, 0))
        await produce(log, "gone", 0, [b"x"] * 5, producer=(7, 0, 0))
        # Transactions: an aborted one (the aborted index) and an open one, on both topics.
        for name in ("t.1", "gone"):
            for seq in (0, 1):
                batch = build_batch(
                    [b"t"], producer_id=9, producer_epoch=0, base_sequence=seq, transactional=True
                )
                await log.append(name, 0, [batch])
                if seq == 0:
                    await log.end_transaction(name, 0, 9, 0, commit=False, transaction=1)
        await log.delete_records("t.1", 1, 2)  # DeleteRecords frees pages, adds no key
        await log.set_topic_defaults({"retention.ms": "86400000"})  # serve --config's
        # A dynamic broker config, as AlterConfigs on the cluster default stores it
        # (wire/handlers/configs.py): cluster-wide under "", a broker's under its id.
        await log.redis.hset(keys.broker_configs, "", msgpack.packb({"log.retention.ms": "1"}))
        quota = check_alteration([("client-id", "c")], [("producer_byte_rate", 1024.0, False)])
        await QuotaStore(log.redis, "lay").alter([quota])  # AlterClientQuotas, `quotas set`
        acl = AclBinding(
            ResourceType.TOPIC,
            "t.1",
            PatternType.LITERAL,
            "User:a",
            "*",
            Operation.READ,
            Permission.ALLOW,
        )
        await AclStore(log.redis, "lay").add([acl])  # CreateAcls, `acls add`
        credential = new_credential(SCRAM_SHA_512, "pw")  # `users add`, AlterUserScram...
        await CredentialStore(log.redis, "lay").put("u", credential)
        # A compact topic whose compaction removes pages.
        await log.create_topic(TopicConfig("kv", 1, configs={"cleanup.policy": "compact"}))
        for _ in range(3):
            await produce(log, "kv", 0, [b"v"] * 4096, keys=[b"k"] * 4096)

        groups = GroupCoordinator(log, CoordinatorConfig(initial_rebalance_delay_ms=0))
        groups.start()
        joined = await groups.join(
            "g{1}",  # a brace in a group id must not break the hash tag
            JoinRequest("", None, "c", "/h", 10_000, 10_000, "consumer", [("r", b"")], False),
        )
        await groups.sync("g{1}", joined.generation, joined.member_id, None, {})
        await groups.admin.commit(
            "g{1}", joined.generation, joined.member_id, None, {("t.1", 0): (2, None, -1)}
        )
        # An open transaction with offsets pending on it: its state, the id sets, and the
        # group's pending offsets (markers are never written here: no EndTxn).
        txns = TransactionCoordinator(log, Partitions(log, None), groups)
        init = await txns.init_producer("tx{1}", 60_000)
        await txns.add_partitions("tx{1}", init.producer_id, init.producer_epoch, [("t.1", 0)])
        await txns.add_offsets("tx{1}", init.producer_id, init.producer_epoch, "g{1}")
        await txns.commit_offsets(
            "tx{1}", "g{1}", init.producer_id, init.producer_epoch, {("t.1", 0): (1, None, -1)}
        )
        await groups.stop()
        # A consumer-protocol (KIP-848) group: its state and the active set.
        await ConsumerGroupCoordinator(log).heartbeat(
            "cg", Heartbeat("m", 0, rebalance_timeout_ms=1000, topics=["t.1"]), 1
        )
        # A share group (KIP-932): its state, the active set, a share-partition with a
        # record acquired (its records and locks).
        share = ShareGroupCoordinator(log)
        await share.heartbeat("sg", ShareHeartbeat("m", 0, topics=["t.1"]))
        config = ShareGroupConfig(record_lock_duration_ms=1000, max_record_locks=100)
        await share.store.prepare("sg", ("t.1", 0), 0, config, 0, 0, 10)
        await share.store.acquire("sg", ("t.1", 0), "m", 0, config, 10, [(0, 0, True)])

        pool = await create_pool(pg_dsn)
        await ensure_schema(pool)
        compacted = (await Archiver(log, pool, idle_close_ms=0).run_once()).compacted
        assert [t.total("pages_removed") for t in compacted] == [2]
        await pool.close()
        # A restore writes a partition's epoch history.
        restored = TopicConfig("back", 1)
        await log.restore([RestoredTopic(restored, [RestoredPartition(10, 0)])], 0, 0)

        # A broker registered (`serve`): the registry, its sessions and membership number.
        registry = Registry(log, BrokerInfo(1, {"PLAINTEXT": ("127.0.0.1", 9092)}))
        await registry.register()
        await registry.heartbeat()  # reports the highest sequence number it appended
        # A second broker without a node id of its own: assigned the next one.
        await Registry(log, BrokerInfo(1, {"PLAINTEXT": ("127.0.0.1", 9093)})).join(True)
        # The primary's replication id, as a Sentinel client records it.
        await EpochBump("lay", Log)(log.redis)

        patterns = keys.patterns()
        present = await all_keys(log.redis)
        assert unmatched(present, patterns) == []
        # The scenario reaches every kind of key, so a new one cannot hide behind it.
        for name, pattern in patterns.items():
            assert any(pattern.match(k) for k in present), name
        suffixes = {
            k.rsplit("}:", 1)[1].split(":")[0] for k in present if patterns["partition"].match(k)
        }
        assert suffixes == {s.split(":")[0] for s in PARTITION}

        await log.delete_topic("gone")
        left = await all_keys(log.redis)
        assert [k for k in left if "gone" in k] == []
        assert unmatched(left, patterns) == []
        await log.redis.aclose()

    asyncio.run(scenario())
