"""The Log's tests (tests/test_log.py, test_log_steps.py, test_sequence.py, test_consume.py,
test_delete_records.py, test_retention.py, test_topic_configs.py, test_transactions_log.py)
against the 3-primary cluster fixture, through ``redis+cluster://``
(kafkaesque.hot.tier_cluster.cluster_client): the Log in the cluster layout, topics in steps,
appends on the partitions' shards."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import tests.test_consume
import tests.test_delete_records
import tests.test_log
import tests.test_log_steps
import tests.test_retention
import tests.test_sequence
import tests.test_topic_configs
import tests.test_transactions_log
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.connect import HotTierCluster, redis_client
from kafkaesque.hot.log import Log
from kafkaesque.hot.slots import slot_of
from kafkaesque.partition.read_types import FetchRequest
from kafkaesque.records.build import build_batch
from tests.cluster_servers import ClusterServers

# Tests that name single-Redis keys ("ks:archiving", "ks:gseq") or count on one counter
# (ids 1, 2, 3...: on a cluster ids are the slots' clocks, docs/scale-out.md 3.6).
SINGLE_REDIS_ONLY = {
    "test_one_redis_keeps_one_counter",
    "test_cluster_mode_ids_follow_the_slot_clock",  # the cluster layout on one server
    "test_global_sequence_follows_produce_order_across_topics",
    "test_archiving_keeps_pages_until_archived_then_applies_retention",
    "test_lost_redis_waits_for_recovery_and_restores_offsets",  # test_log_steps' instead
    "test_archiving_is_a_field_of_every_partition",
    # KEYS on the client: one node's keys on a cluster
    "test_delete_moves_the_log_start_and_frees_whole_pages",
}


@pytest.fixture
def make_log(empty_cluster: ClusterServers) -> Callable[[], Log]:
    def make() -> Log:
        client = redis_client(empty_cluster.cluster_url)
        assert isinstance(client, HotTierCluster)
        return Log(client)

    return make


def _collect(module) -> dict[str, object]:
    return {
        name: test
        for name, test in vars(module).items()
        if name.startswith("test_") and callable(test) and name not in SINGLE_REDIS_ONLY
    }


for _module in (
    tests.test_log,
    tests.test_log_steps,
    tests.test_sequence,
    tests.test_consume,
    tests.test_delete_records,
    tests.test_retention,
    tests.test_topic_configs,
    tests.test_transactions_log,
):
    for _name, _test in _collect(_module).items():
        globals()[_name] = _test


def test_read_many_across_slots_keeps_one_budget(make_log: Callable[[], Log]) -> None:
    """A fetch's partitions in different slots: one read_many.lua per slot, and the answers
    still within one byte budget, in the order asked, the first batch coming whole."""

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("f", 6))
        assert len({slot_of("f", p) for p in range(6)}) == 6
        batch = build_batch([b"v" * 1000])
        appended = await log.append_many([("f", p, [batch]) for p in range(6)])
        assert [a.base_offsets for a in appended] == [[0]] * 6
        requests = [FetchRequest("f", p, 0, 1 << 20) for p in range(6)]
        results = await log.read_many(requests, max_bytes=3 * len(batch))
        assert [len(r.batches) for r in results] == [1, 1, 1, 0, 0, 0]
        assert [r.log_end for r in results] == [1] * 6
        results = await log.read_many(requests, max_bytes=10)  # the first comes whole
        assert [len(r.batches) for r in results] == [1, 0, 0, 0, 0, 0]
        ends = await log.partition_offsets([("f", p) for p in (5, 0, 3)] + [("f", 9)])
        assert ends == [(0, 1, 0, 1)] * 3 + [None]

    asyncio.run(scenario())


def test_a_connection_closed_under_a_command_is_retried(
    make_log: Callable[[], Log], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another task closing the connection an append had taken (redis-py drops a node's
    connections on a new slot map) leaves its stream None; the append is retried on a new
    connection, not raised as an AttributeError (an internal error, the client's
    connection closed)."""
    from redis.asyncio.connection import Connection

    send = Connection._send_packed_command
    closed: list[Connection] = []

    async def closed_first(self: Connection, command) -> None:
        if not closed:
            closed.append(self)
            self._writer = None  # as disconnect() from another task leaves it
        await send(self, command)

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("c", 1))
        monkeypatch.setattr(Connection, "_send_packed_command", closed_first)
        appended = await log.append("c", 0, [build_batch([b"v"])])
        assert closed and appended.base_offsets == [0]
        monkeypatch.undo()
        results = await log.read_many([FetchRequest("c", 0, 0, 1 << 20)], max_bytes=1 << 20)
        assert results[0].log_end == 1  # appended once

    asyncio.run(scenario())


def test_a_transaction_after_a_reset_stays_in_the_callers_event_loop(
    empty_cluster: ClusterServers,
) -> None:
    """redis-py's cluster pipeline ran each command queued in a transaction in a thread
    with an event loop of its own; right after a reset (a node failed: the slot map is to
    be read again) that loop read the slot map, and the connections it made or took
    failed the next commands of the client's own loop ("Event loop is closed", seen in
    a broker's log after a primary was killed)."""

    async def main() -> None:
        client = redis_client(empty_cluster.cluster_url)
        assert isinstance(client, HotTierCluster)
        try:
            keys = [f"loop-{i}" for i in range(24)]  # on every shard
            for key in keys:
                await client.set(key, key)
            for _ in range(3):
                client._initialize = True  # what HotTierCluster.aclose does on a reset
                pipe = client.pipeline(transaction=True)
                pipe.set("{loop}a", "1")
                pipe.get("{loop}a")
                assert await pipe.execute() == [True, b"1"]
                for key in keys:  # each node's connections, from this loop
                    assert await client.get(key) == key.encode()
                    plain = client.pipeline(transaction=False)
                    plain.get(key)
                    assert await plain.execute() == [key.encode()]
        finally:
            await client.aclose()

    asyncio.run(main())


def test_a_slot_map_naming_a_node_that_moved_the_slot_on_mends_itself(
    make_log: Callable[[], Log],
) -> None:
    """A slot map read while a slot migrated names its old owner, which answers MOVED. Its
    switch hooks fail there, and every command for that node waited on them, CLUSTER
    SLOTS too when it is the default node: nothing read the map again, and a partition
    stayed unwritable for minutes. Now a MOVED in the hooks, or the watch's look at the
    map, mends it: a few retriable failures at most."""
    from kafkaesque.errors import HotTierUnavailable
    from kafkaesque.hot.failover import FailoverWatch

    async def scenario() -> None:
        log = make_log()
        cluster = log.redis
        assert isinstance(cluster, HotTierCluster)
        await cluster.initialize()
        default = cluster.get_default_node()
        topic = next(
            f"m{n}"
            for n in range(200)
            if cluster.nodes_manager.slots_cache[slot_of(f"m{n}", 0)][0] is not default
        )
        await log.create_topic(TopicConfig(topic, 1))
        await log.append(topic, 0, [build_batch([b"before"])])
        await FailoverWatch(log).check()  # the hooks ran on every primary
        stale = dict(cluster.nodes_manager.slots_cache)  # a new map, as a re-read makes
        stale[slot_of(topic, 0)] = [default]
        cluster.nodes_manager.slots_cache = stale

        async def retried(step: Callable[[], object]) -> int:
            for failures in range(3):
                try:
                    await step()  # type: ignore[misc]
                    return failures
                except HotTierUnavailable:
                    continue
            raise AssertionError("still failing after 3 tries")

        assert await retried(lambda: FailoverWatch(log).check()) <= 1
        stale = dict(cluster.nodes_manager.slots_cache)
        stale[slot_of(topic, 0)] = [default]
        cluster.nodes_manager.slots_cache = stale
        assert await retried(lambda: log.append(topic, 0, [build_batch([b"after"])])) <= 1
        results = await log.read_many([FetchRequest(topic, 0, 0, 1 << 20)], max_bytes=1 << 20)
        assert results[0].log_end == 2
        await cluster.aclose()

    asyncio.run(scenario())
