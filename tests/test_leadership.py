"""Brokers sharing one Redis: the registry's sessions, rendezvous leadership, lead.lua's
compare-and-set with its epochs, and the fencing of appends in append.lua."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
import redis.asyncio

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import DuplicateBroker, NotLeader
from kafkaesque.hot.log import Log
from kafkaesque.hot.registry import BrokerInfo, Registry
from kafkaesque.partition.leadership import Leadership, partition_key, winner
from kafkaesque.records.build import build_batch


def test_winner_spreads_keys_evenly_and_moves_few_on_a_join() -> None:
    keys = [partition_key(b"t" * 16, p) for p in range(3000)]
    three = Counter(winner(k, [1, 2, 3]) for k in keys)
    assert set(three) == {1, 2, 3}
    assert all(800 < n < 1200 for n in three.values()), three
    four = {k: winner(k, [1, 2, 3, 4]) for k in keys}
    moved = [k for k in keys if four[k] != winner(k, [1, 2, 3])]
    assert all(four[k] == 4 for k in moved)  # only to the newcomer
    assert 600 < len(moved) < 900  # about a quarter
    # One leaving gives up only its own.
    two = {k: winner(k, [1, 3]) for k in keys}
    assert all(two[k] == winner(k, [1, 2, 3]) for k in keys if winner(k, [1, 2, 3]) != 2)
    assert winner(b"x", []) is None


def _info(node: int, port: int) -> BrokerInfo:
    return BrokerInfo(node, {"PLAINTEXT": ("127.0.0.1", port)})


def test_registry_sessions(redis_url: str) -> None:
    asyncio.run(_registry_sessions(redis_url))


async def _registry_sessions(redis_url: str) -> None:
    log = Log(redis.asyncio.Redis.from_url(redis_url))
    one = Registry(log, _info(1, 9001), session_ms=400, heartbeat_ms=100)
    two = Registry(log, _info(2, 9002), session_ms=400, heartbeat_ms=100)
    await one.heartbeat()
    await two.heartbeat()
    await one.heartbeat()
    assert one.nodes == two.nodes == [1, 2]
    assert one.live[2].endpoints == {"PLAINTEXT": ("127.0.0.1", 9002)}
    # Another process with node id 1 at another address is refused while 1 lives...
    twin = Registry(log, _info(1, 9003), session_ms=400)
    with pytest.raises(DuplicateBroker, match="9001"):
        await twin.register()
    # ... but the same broker restarted (same address) takes its id over.
    restarted = Registry(log, _info(1, 9001), session_ms=400)
    await restarted.register()
    await one.heartbeat()  # the old process: its session is another's now, it registers
    assert one.registered
    # A broker that stops heartbeating is forgotten after the session timeout.
    before = two.membership
    await asyncio.sleep(0.5)
    await one.heartbeat()
    assert one.nodes == [1]
    assert one.membership > before
    # The highest sequence number one broker reports floors the other's next appends
    # (what orders records a heartbeat apart across brokers on a cluster).
    other = Log(log.redis)
    one.log.highest_sequence = 1_000_000
    await one.heartbeat()
    two.log = other
    await two.heartbeat()
    assert other.highest_sequence == 1_000_000
    two.log = log
    # Leaving is at once.
    await two.heartbeat()  # registers again (its session expired)
    await one.heartbeat()
    assert one.nodes == [1, 2]
    await two.deregister()
    await one.heartbeat()
    assert one.nodes == [1]
    await log.redis.aclose()


def test_lead_moves_with_a_new_epoch_and_fences_the_old_leader(redis_url: str) -> None:
    asyncio.run(_lead_moves_with_a_new_epoch_and_fences_the_old_leader(redis_url))


async def _lead_moves_with_a_new_epoch_and_fences_the_old_leader(redis_url: str) -> None:
    log = Log(redis.asyncio.Redis.from_url(redis_url))
    await log.create_topic(TopicConfig("moves", 1))
    await log.append("moves", 0, [build_batch([b"a", b"b"])])
    # A first leader is not a move: the epoch stays.
    assert await log.lead([("moves", 0, "", "1")]) == [(True, "1", 0)]
    # A stale compare-and-set changes nothing and tells the leader.
    assert await log.lead([("moves", 0, "", "2")]) == [(False, "1", 0)]
    log.node = "1"
    await log.append("moves", 0, [build_batch([b"c"])])
    # Broker 2 takes over: a new epoch starting at the log end.
    assert await log.lead([("moves", 0, "1", "2")]) == [(True, "2", 1)]
    assert await log.leaders([("moves", 0), ("moves", 5)]) == [("2", 1, ""), None]
    assert await log.epoch_end_offset("moves", 0, 0) == (0, 3)
    # Broker 1's appends are refused now, and nothing is written.
    with pytest.raises(NotLeader, match="broker 2"):
        await log.append("moves", 0, [build_batch([b"late"])])
    [refused] = await log.append_many([("moves", 0, [build_batch([b"late"])])])
    assert isinstance(refused, NotLeader)
    log.node = "2"
    appended = await log.append("moves", 0, [build_batch([b"d"])])
    assert appended.base_offsets == [3]
    read = await log.read("moves", 0, 0)
    assert read.leader_epoch == 1
    # Tools that append without a broker (the CLI) are never refused.
    log.node = ""
    await log.append("moves", 0, [build_batch([b"e"])])
    assert await log.lead([("nothing", 0, "", "1")]) == [None]
    await log.redis.aclose()


def test_reconcile_claims_what_a_leaving_broker_had(redis_url: str) -> None:
    asyncio.run(_reconcile_claims_what_a_leaving_broker_had(redis_url))


async def _reconcile_claims_what_a_leaving_broker_had(redis_url: str) -> None:
    """Two brokers split the partitions; when one goes, the other's reconcile claims
    its partitions with a new epoch; a hand-over moves them at once."""
    client = redis.asyncio.Redis.from_url(redis_url)
    log_a, log_b = Log(client), Log(client)
    a = Registry(log_a, _info(1, 9001), session_ms=300)
    b = Registry(log_b, _info(2, 9002), session_ms=300)
    lead_a, lead_b = Leadership(log_a, a), Leadership(log_b, b)
    await a.heartbeat()
    await b.heartbeat()
    await a.heartbeat()
    await log_a.create_topic(TopicConfig("split", 16))
    await lead_a.reconcile()
    await lead_b.reconcile()
    assert lead_a.leaders == lead_b.leaders
    assert set(lead_a.leaders.values()) == {1, 2}
    mine = [key for key, node in lead_b.leaders.items() if node == 2]
    assert lead_a.check(*mine[0]) is not None and lead_b.check(*mine[0]) is None
    await asyncio.sleep(0.4)  # broker 2 stops heartbeating
    await a.heartbeat()
    await lead_a.reconcile()
    assert set(lead_a.leaders.values()) == {1}
    leaders = await log_a.leaders(mine)
    assert all(entry == ("1", 1, "") for entry in leaders)  # each moved once: epoch 1
    # Broker 2 returns: it wins back its partitions (the same ones) from broker 1.
    await b.heartbeat()
    await a.heartbeat()
    await lead_b.reconcile()
    assert [key for key, node in lead_b.leaders.items() if node == 2] == mine
    # It hands them over on a graceful stop.
    assert await lead_b.hand_over() == len(mine)
    assert all(entry[0] == "1" for entry in await log_a.leaders(mine))
    await client.aclose()


def test_a_leader_no_broker_wrote_is_taken_over(redis_url: str) -> None:
    asyncio.run(_a_leader_no_broker_wrote_is_taken_over(redis_url))


async def _a_leader_no_broker_wrote_is_taken_over(redis_url: str) -> None:
    """``meta.leader`` naming no broker (another program's value: broker ids are numbers)
    is a leader that is gone: the broker that should lead claims the partition with a new
    epoch instead of failing to start."""
    client = redis.asyncio.Redis.from_url(redis_url)
    log_ = Log(client)
    registry = Registry(log_, _info(0, 9001), session_ms=300)
    await registry.heartbeat()
    await log_.create_topic(TopicConfig("odd", 1))
    await log_.lead([("odd", 0, "", "a-broker")])
    leadership = Leadership(log_, registry)
    assert leadership.effective(b"t" * 16, 0, "a-broker", "") == 0
    await leadership.reconcile()
    assert leadership.leaders == {("odd", 0): 0}
    assert [entry[:2] for entry in await log_.leaders([("odd", 0)])] == [("0", 1)]
    await client.aclose()
