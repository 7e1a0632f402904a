"""The cluster and Sentinel fixtures work, and where today's code stands on a cluster.

The probes at the end assert today's behaviour precisely (which scripts are refused with
CROSSSLOT, what redis-py's cluster client refuses before sending, what a script sees in a
slot being migrated key by key): they are the starting point of docs/scale-out.md, and
whoever implements it changes them as the scripts move to per-slot keys.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
from redis.exceptions import (
    AskError,
    ClusterCrossSlotError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import UnknownTopic
from kafkaesque.hot.keys import Keys
from kafkaesque.hot.log import Log
from kafkaesque.hot.scripts import SCRIPT_NAMES, source
from kafkaesque.hot.sequence import EPOCH_MS, STEPS_PER_MS, clock
from kafkaesque.hot.slots import slot_of
from kafkaesque.records.build import build_batch, build_control_batch
from tests.cluster_servers import SLOTS, ClusterServers, SentinelServers

# -- the fixtures ---------------------------------------------------------------------


def test_cluster_has_three_primaries_and_every_slot(cluster: ClusterServers) -> None:
    owners = cluster.slot_owners()
    assert len(set(owners.values())) == 3
    covered = sorted(owners)
    assert covered[0][0] == 0 and covered[-1][1] == SLOTS - 1
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(covered))
    for node in cluster.primaries:
        info = node.client().cluster("INFO")
        assert info["cluster_state"] == "ok"
        assert int(info["cluster_slots_assigned"]) == SLOTS
        assert int(info["cluster_known_nodes"]) == 3
    assert cluster.cluster_url.startswith("redis+cluster://127.0.0.1:")
    assert cluster.cluster_url.count(",") == 2


def test_cluster_client_reaches_every_shard(empty_cluster: ClusterServers) -> None:
    client = empty_cluster.client()
    by_node: dict[str, str] = {}
    i = 0
    while len(by_node) < 3:
        key = f"k{i}"
        by_node.setdefault(empty_cluster.owner(client.keyslot(key)).node_id, key)
        i += 1
    for key in by_node.values():
        client.set(key, key)
    assert [client.get(k) for k in by_node.values()] == [k.encode() for k in by_node.values()]
    from_url = redis.cluster.RedisCluster.from_url(empty_cluster.url)
    assert len(from_url.get_primaries()) == 3


def test_replicated_cluster_has_a_replica_per_primary(
    replicated_cluster: ClusterServers,
) -> None:
    assert len(replicated_cluster.replicas) == 3
    for primary in replicated_cluster.primaries:
        replicas = primary.client().execute_command("CLUSTER", "REPLICAS", primary.node_id)
        assert len(replicas) == 1
    for replica in replicated_cluster.replicas:
        info = replica.client().info("replication")
        assert info["role"] == "slave" and info["master_link_status"] == "up"


def _partition_keys(client: redis.cluster.RedisCluster, tag: str, pages: int) -> list[str]:
    """Keys shaped like a partition's: meta, index, and ``pages`` pages."""
    prefix = f"ks:{{{tag}}}:"
    client.hset(prefix + "meta", mapping={"end": pages * 2, "page": pages})
    client.zadd(prefix + "index", {str(n): n * 2 for n in range(pages)})
    for n in range(pages):
        client.rpush(f"{prefix}page:{n}", b"batch-a", b"batch-b")
    return [prefix + "meta", prefix + "index", *(f"{prefix}page:{n}" for n in range(pages))]


def test_reshard_key_by_key(empty_cluster: ClusterServers) -> None:
    """SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE, as --cluster reshard does."""
    client = empty_cluster.client()
    keys = _partition_keys(client, "events:0", pages=150)  # more than one MIGRATE batch
    slot = client.keyslot(keys[0])
    source = empty_cluster.owner(slot)
    target = next(n for n in empty_cluster.primaries if n is not source)
    assert empty_cluster.reshard(slot, target) == len(keys)
    empty_cluster.wait_ok()
    assert empty_cluster.owner(slot) is target
    assert target.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == len(keys)
    assert source.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    # A client that knew the old map follows the MOVED reply.
    assert client.lrange(keys[-1], 0, -1) == [b"batch-a", b"batch-b"]
    assert client.hget(keys[0], "end") == b"300"


def _supports_atomic_migration(cluster: ClusterServers) -> bool:
    lines = cluster.primaries[0].client().execute_command("CLUSTER", "HELP")
    return any(line.startswith(b"MIGRATESLOTS") for line in lines)


def test_atomic_slot_migration(empty_cluster: ClusterServers) -> None:
    """Valkey 9's CLUSTER MIGRATESLOTS moves a slot whole (docs/scale-out.md prefers it)."""
    if not _supports_atomic_migration(empty_cluster):
        pytest.skip("the server has no CLUSTER MIGRATESLOTS (Valkey < 9)")
    client = empty_cluster.client()
    keys = _partition_keys(client, "orders:3", pages=20)
    slot = client.keyslot(keys[0])
    source = empty_cluster.owner(slot)
    target = next(n for n in empty_cluster.primaries if n is not source)
    empty_cluster.migrate_slots(slot, slot, target)
    empty_cluster.wait_ok()
    assert target.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == len(keys)
    assert source.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    assert client.lrange(keys[-1], 0, -1) == [b"batch-a", b"batch-b"]


def test_sentinel_follows_a_failover(sentinel: SentinelServers) -> None:
    """A write WAITed for by the replica survives SENTINEL FAILOVER; the client asks the
    sentinel for the new primary."""
    primary = sentinel.client().master_for(sentinel.name, socket_timeout=2)
    primary.set("acked", "1")
    assert primary.execute_command("WAIT", 1, 2000) == 1
    old = sentinel.primary_address()
    new = sentinel.failover()
    assert new != old and new[1] == sentinel.replica.port
    primary = sentinel.client().master_for(sentinel.name, socket_timeout=2)
    assert primary.get("acked") == b"1"
    primary.set("after", "1")  # the new primary takes writes
    assert sentinel.url.startswith("redis+sentinel://127.0.0.1:")


# -- where today's code stands on a cluster ----------------------------------------------


def test_log_through_redis_py_cluster_client(empty_cluster: ClusterServers) -> None:
    """Log accepts redis-py's asyncio RedisCluster and takes the cluster key layout from
    it: the catalog's keys share a slot (Log.topic's MGET runs), and a topic is created in
    steps (kafkaesque/hot/log_steps.py)."""

    async def scenario() -> dict[str, str]:
        client = redis.asyncio.cluster.RedisCluster.from_url(empty_cluster.url)
        log = Log(client)
        outcomes: dict[str, str] = {}

        async def step(name: str, call) -> None:
            try:
                await call
                outcomes[name] = "ok"
            except (RedisClusterException, UnknownTopic) as exc:
                outcomes[name] = str(exc)

        await step("ensure_recovered", log.ensure_recovered())  # SET NX of incarnation
        await step("list_topics", log.list_topics())
        await step("new_producer_id", log.new_producer_id())
        await step("create_topic", log.create_topic(TopicConfig("t", 1)))
        await step("topic", log.topic("t"))
        await step("state", log.state("t", 0))
        await client.aclose()
        return outcomes

    assert asyncio.run(scenario()) == {
        "ensure_recovered": "ok",
        "list_topics": "ok",
        "new_producer_id": "ok",
        "create_topic": "ok",
        "topic": "ok",
        "state": "ok",
    }


TOPIC = "orders"


def _seed_partition(redis_url: str) -> list[bytes]:
    """A topic on a single Redis, built by today's Log: archiving on, 3 records per page,
    5 batches of 2 records (so closed pages exist). Returns the stored batches."""

    async def scenario() -> list[bytes]:
        client = redis.asyncio.Redis.from_url(redis_url)
        log = Log(client)
        await log.ensure_recovered()
        await log.create_topic(TopicConfig(TOPIC, 2, page_size=3))
        await log.enable_archiving()
        for i in range(5):
            await log.append(TOPIC, 0, [build_batch([b"a%d" % i, b"b%d" % i], timestamp=1000 + i)])
        read = await log.read(TOPIC, 0, 0)
        await client.aclose()
        return read.batches

    return asyncio.run(scenario())


def _copy_partition(redis_url: str, cluster: ClusterServers, partition: int) -> list[str]:
    """DUMP/RESTORE every key of one partition from the single Redis into the cluster: its
    keys share one hash tag, so they land in one slot."""
    single = redis.Redis.from_url(redis_url)
    target = cluster.client()
    prefix = Keys().partition(TOPIC, partition).prefix
    copied = []
    for key in single.scan_iter(match=prefix.replace("{", "[{]").replace("}", "[}]") + "*"):
        ttl = max(single.pttl(key), 0)
        target.restore(key, ttl, single.dump(key), replace=True)
        copied.append(key.decode())
    return copied


def _eval(cluster: ClusterServers, name: str, keys: list[str], args: list) -> str:
    """Run a script (common.lua prepended) on the node serving its first key; "CROSSSLOT"
    when the server refuses the keys, else "ran" (a result or the script's own error)."""
    slot = cluster.client().keyslot(keys[0])
    node = cluster.owner(slot).client()
    try:
        node.eval(source(name), len(keys), *keys, *args)
    except ClusterCrossSlotError:  # the server's -CROSSSLOT reply
        return "CROSSSLOT"
    except ResponseError as exc:
        return "ran: " + str(exc).split(" ")[0]
    return "ran"


def test_which_scripts_run_on_a_cluster(empty_cluster: ClusterServers, redis_url: str) -> None:
    """Every script with the KEYS kafkaesque passes on a cluster (kafkaesque/hot/log.py,
    log_topics.py, archiving.py, compaction.py, in the cluster layout: ``Keys(cluster=True)``,
    the slot's hash for the sequence): the ones that touch several partitions, or a
    partition and the catalog, are refused with CROSSSLOT; those confined to one
    partition's slot run."""
    stored = _seed_partition(redis_url)
    assert len(_copy_partition(redis_url, empty_cluster, 0)) >= 5
    k = Keys(cluster=True)
    p = k.partition(TOPIC, 0)
    p1 = k.partition(TOPIC, 1)
    config = TopicConfig(TOPIC, 2, page_size=3)
    batch = build_batch([b"x"])
    now = int(time.time() * 1000)
    floor = clock(now)
    appending = [p.meta, p.index, p.stats, k.slot_hash(slot_of(TOPIC, 0)), p.producers, p.meta]
    registry = [k.brokers, k.brokers_alive, k.membership, k.brokers_sequence]
    txn_state = [k.transaction("t"), k.transaction("t", ":lock"), k.transactions]
    txn_state.append(k.transactions_due)
    calls: dict[str, tuple[list[str], list]] = {
        "create": (
            [k.topics, k.topic("new"), k.incarnation, k.archiving, p.meta],
            ["new", b"", ""],
        ),
        "append": (
            [*appending, p.txn_open, p.txn_ended],
            [p.prefix, k.appended(TOPIC), now, floor, "", "", 0, 1, -1, -1, -1, batch],
        ),
        "end_txn": (
            [*appending, p.txn_open, p.txn_aborted, p.txn_ended],
            [p.prefix, k.appended(TOPIC), now, 7, 0, 1, build_control_batch(7, 0, True), floor, 1],
        ),
        "read": (
            [p.meta, p.index, p.txn_open, p.txn_aborted],
            [p.prefix, 0, 1 << 20, 1 << 31, 1, 1],
        ),
        "read_many": ([p.meta], [1 << 20, 1, 1, 0, 0, 1 << 20]),
        "state": ([p.meta, p.index, p.stats], [p.prefix]),
        "delete": (
            [k.topics, k.topic(TOPIC), p.meta, p.index, p.stats, p.producers],
            [TOPIC, p.prefix],
        ),
        "find_time": ([p.index, p.meta, p.stats], [p.prefix, 1002, 0]),
        "max_time": ([p.index, p.meta, p.stats], [p.prefix, 0]),
        "configure": ([k.topic(TOPIC), k.archiving, p.meta], [b"", config.pack(), "", 2]),
        "closed_pages": ([p.meta, p.index], [p.prefix, 0, 16]),
        "mark_archived": ([p.meta, p.index, p.stats], [p.prefix, 0, 0]),
        "close_idle": ([p.meta, p.stats], [p.prefix, now]),
        "restore": ([k.topics, k.topic(TOPIC), p.meta, p.index, p.stats], [TOPIC, b"", ""]),
        "archive_on": ([p.meta, p.index], [p.prefix]),
        "producer_id": ([k.producer_ids], [now << 10]),
        "delete_records": ([p.meta, p.index, p.stats], [p.prefix, 0]),
        "compact": ([p.meta, p.index, p.stats], [p.prefix, 0, 0, "", b"", "0 0 0 0"]),
        # the steps of kafkaesque/hot/log_steps.py: the catalog, or one partition's slot
        "create_catalog": (
            [
                k.topics,
                k.topic("new"),
                k.incarnation,
                k.archiving,
                k.sequence_floor,
                k.steps,
                k.creating("new"),
                k.deleting("new"),
            ],
            ["new", config.pack(), now, "ab"],
        ),
        "create_partition": (
            [p1.meta, k.slot_hash(slot_of(TOPIC, 1))],
            [config.lua_settings(), "ab", 1, floor, 0],
        ),
        "configure_catalog": (
            [
                k.topic("new"),
                k.archiving,
                k.sequence_floor,
                k.steps,
                k.configuring("new"),
                k.config_versions,
            ],
            [config.pack(), config.pack(), now, "new"],
        ),
        "configure_partition": ([p1.meta], [config.lua_settings(), 1, "ab"]),
        "delete_catalog": (
            [
                k.topics,
                k.topic("new"),
                k.steps,
                k.deleting("new"),
                k.creating("new"),
                k.configuring("new"),
                k.config_versions,
            ],
            ["new", "1 ab", now, config.pack()],
        ),
        "delete_partition": ([p1.meta, p1.index, p1.stats, p1.producers], [p1.prefix, "ab"]),
        "slot_tick": ([k.slot_hash(slot_of(TOPIC, 1))], [floor]),
        "step_done": ([k.deleting("new"), k.steps], ["1 ab"]),
        "tick": ([k.sequence_floor], [EPOCH_MS, STEPS_PER_MS]),
        # the broker registry (catalog keys) and a partition's leadership
        "lead": ([p.meta, p.epochs], ["", "1"]),
        "prefer": ([p.meta], ["1"]),
        "register": (registry, [1, "t", "a", b"", 9000, k.membership_channel]),
        "heartbeat": (registry, [1, "t", 9000, k.membership_channel, 5]),
        "deregister": (registry, [1, "t", k.membership_channel]),
        "brokers_list": (registry, []),
        "failover_epoch": ([p.meta, p.epochs], ["replid", 0]),
        "archive_barrier": ([p.meta], []),
        # high watermarks (kafkaesque/hot/high_watermark.py): one slot's partitions per call
        "hw_mark": ([p.meta], []),
        "hw_raise": ([p.meta], [1, k.appended(TOPIC)]),
        # a transactional id's state saved without its lock (kafkaesque/hot/txn_states.py):
        # the id's hash beside the catalog's id sets, or a group's pending offsets
        "txn_save": (txn_state, [0, *[""] * 6, "t", ""]),
        "txn_stage": ([*txn_state[:2], k.group_txn_offsets("g")], [0, *[""] * 6]),
        "txn_end": (txn_state, [0, *[""] * 6, "t", "", "", 0, 0]),
    }
    # The partition-local scripts give on the cluster what they gave on one Redis.
    owner = empty_cluster.owner(empty_cluster.client().keyslot(p.meta)).client()
    status, _start, end, _epoch, _lso, _aborted, *batches = owner.eval(
        source("read"),
        4,
        p.meta,
        p.index,
        p.txn_open,
        p.txn_aborted,
        p.prefix,
        0,
        1 << 20,
        1 << 31,
        1,
        0,
    )
    assert (status, end, batches) == (0, 10, stored)
    pages = owner.eval(source("closed_pages"), 2, p.meta, p.index, p.prefix, 0, 16)
    assert pages[:3] == [0, 0, 4]  # page 0: offsets 0..3 (two batches of two)
    assert sorted(calls) == sorted(SCRIPT_NAMES)
    empty_cluster.client().set(k.incarnation, "1")  # as Log.ensure_recovered
    outcomes = {name: _eval(empty_cluster, name, *call) for name, call in calls.items()}
    assert outcomes == {
        # the catalog beside a partition (the topic set and config, and each partition)
        "create": "CROSSSLOT",
        "delete": "CROSSSLOT",
        "configure": "CROSSSLOT",
        "restore": "CROSSSLOT",
        # the transaction coordinator's lock-free saves: one Redis only (a cluster takes
        # the id's lock, kafkaesque/hot/txn_states.py lock_free)
        "txn_save": "CROSSSLOT",
        "txn_stage": "CROSSSLOT",
        "txn_end": "CROSSSLOT",
        # one partition's slot only (its keys and the slot's hash), or one catalog key
        "append": "ran",
        "end_txn": "ran",
        "state": "ran",
        "close_idle": "ran",
        "archive_on": "ran",
        "delete_records": "ran",
        "read": "ran",
        "read_many": "ran",  # a fetch's partitions of one slot: one call per slot
        "find_time": "ran",
        "max_time": "ran",
        "closed_pages": "ran",
        "mark_archived": "ran",
        "producer_id": "ran",
        "compact": "ran: CONFLICT",  # the stale page it was given: it ran and refused
        "create_catalog": "ran",
        "create_partition": "ran",
        "configure_catalog": "ran",
        "configure_partition": "ran",
        "delete_catalog": "ran",
        "delete_partition": "ran",
        "slot_tick": "ran",
        "step_done": "ran",
        "tick": "ran",
        "lead": "ran",
        "prefer": "ran",
        "register": "ran",
        "heartbeat": "ran",
        "deregister": "ran",
        "brokers_list": "ran",
        "failover_epoch": "ran",
        "archive_barrier": "ran",
        "hw_mark": "ran",
        "hw_raise": "ran",
    }
    # Even without a global key, a multi-partition script spans slots (one tag each).
    two_partitions = [p.meta, p1.meta]
    assert _eval(empty_cluster, "create", two_partitions, ["x", b"", ""]) == "CROSSSLOT"
    both = [1 << 20, 0, 1, 0, 0, 1 << 20, 0, 1 << 20]
    assert _eval(empty_cluster, "read_many", [p.meta, p1.meta], both) == "CROSSSLOT"
    # The append and the marker took their sequence numbers from the slot's clock.
    assert int(empty_cluster.client().hget(appending[3], "seq")) >= floor + 1


def test_script_in_a_slot_migrating_key_by_key(empty_cluster: ClusterServers) -> None:
    """The hazard of key-by-key resharding for scripts that reach keys through the
    partition's prefix instead of KEYS (read.lua, append.lua and trim_index do): on the
    importing node a key still on the migrating node reads as missing, with no error;
    declared keys split between the nodes get TRYAGAIN; a declared key already gone gets
    ASK. Atomic slot migration (or declaring every key) avoids the first."""
    client = empty_cluster.client()
    prefix = "ks:{events:7}:"
    client.hset(prefix + "meta", "end", 4)
    client.rpush(prefix + "page:0", b"batch")
    slot = client.keyslot(prefix + "meta")
    source_node = empty_cluster.owner(slot)
    target = next(n for n in empty_cluster.primaries if n is not source_node)
    src, dst = source_node.client(), target.client()
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_node.node_id)
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
    try:
        src.execute_command(
            "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", prefix + "meta"
        )
        reads_page = (
            "return {redis.call('HGET', KEYS[1], 'end'), redis.call('LLEN', ARGV[1] .. 'page:0')}"
        )
        pipe = dst.pipeline(transaction=False)
        pipe.execute_command("ASKING")
        pipe.eval(reads_page, 1, prefix + "meta", prefix)
        assert pipe.execute()[-1] == [b"4", 0]  # the page is on the source: seen empty
        with pytest.raises(TryAgainError):
            src.eval("return 1", 2, prefix + "meta", prefix + "page:0")
        with pytest.raises(AskError):
            src.eval("return redis.call('HGET', KEYS[1], 'end')", 1, prefix + "meta")
    finally:
        empty_cluster.reshard(slot, target)  # finish the move: the slot is stable again
    empty_cluster.wait_ok()
    assert client.llen(prefix + "page:0") == 1
