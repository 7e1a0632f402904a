"""Share groups' rules without the wire: KIP-932's simple assignor, ShareGroupHeartbeat's
epochs, member expiry (on a manual clock) giving a member's records back, share sessions,
and a share fetch acquiring from a real log (read_committed skips aborted records)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio

from kafkaesque.clock import ManualClock
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import Code, Refused
from kafkaesque.groups.share.assignor import assign
from kafkaesque.groups.share.config import ShareGroupConfig
from kafkaesque.groups.share.coordinator import ShareGroupCoordinator
from kafkaesque.groups.share.fetch import ShareFetcher
from kafkaesque.groups.share.sessions import ShareSessions
from kafkaesque.groups.share.state import ShareHeartbeat
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import Partitions
from kafkaesque.records.build import build_batch


def test_the_simple_assignor_shares_partitions_among_more_members() -> None:
    three_on_one = assign({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 1})
    assert three_on_one == {"a": [("t", 0)], "b": [("t", 0)], "c": [("t", 0)]}
    two_on_four = assign({"a": ["t"], "b": ["t"]}, {"t": 4})
    assert two_on_four == {"a": [("t", 0), ("t", 2)], "b": [("t", 1), ("t", 3)]}
    three_on_two = assign({"a": ["t"], "b": ["t"], "c": ["t", "u"]}, {"t": 2, "u": 1})
    assert three_on_two == {"a": [("t", 0)], "b": [("t", 1)], "c": [("t", 0), ("u", 0)]}
    assert assign({"a": ["missing"]}, {}) == {"a": []}


def test_share_sessions_epochs() -> None:
    sessions = ShareSessions()
    with pytest.raises(Refused) as missing:
        sessions.find("g", "m", 1)
    assert missing.value.code == Code.SHARE_SESSION_NOT_FOUND
    session = sessions.open("g", "m", [("t", 0)])
    assert sessions.find("g", "m", 1) is session
    with pytest.raises(Refused) as stale:
        sessions.find("g", "m", 1)  # the epoch moved on to 2
    assert stale.value.code == Code.INVALID_SHARE_SESSION_EPOCH
    session.update([("t", 1)], [("t", 0)])
    assert session.partitions == [("t", 1)]
    assert sessions.find("g", "m", -1) is session  # closing: any state of the epoch
    sessions.close(session)
    assert sessions.get("g", "m") is None


def make(url: str, clock: ManualClock) -> tuple[Log, ShareGroupCoordinator, ShareFetcher]:
    log = Log(redis.asyncio.Redis.from_url(url))
    config = ShareGroupConfig(session_timeout_ms=10_000, record_lock_duration_ms=5_000)
    coordinator = ShareGroupCoordinator(log, config, clock)
    return log, coordinator, ShareFetcher(coordinator, Partitions(log), clock)


def test_heartbeats_expiry_and_released_records(redis_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock(1_000_000)
        log, coordinator, fetcher = make(redis_url, clock)
        await log.create_topic(TopicConfig("t", 2))
        await log.append("t", 0, [build_batch([b"a", b"b", b"c"])])
        with pytest.raises(Refused) as empty:
            await coordinator.heartbeat("g", ShareHeartbeat("a", 0, topics=[]))
        assert empty.value.code == Code.INVALID_REQUEST
        a = await coordinator.heartbeat("g", ShareHeartbeat("a", 0, topics=["t"]))
        assert (a.epoch, a.assignment) == (1, [("t", 0), ("t", 1)])
        b = await coordinator.heartbeat("g", ShareHeartbeat("b", 0, topics=["t"]))
        assert (b.epoch, b.assignment) == (2, [("t", 1)])
        again = await coordinator.heartbeat("g", ShareHeartbeat("a", 1))
        assert (again.epoch, again.assignment) == (2, [("t", 0)])  # a new assignment
        quiet = await coordinator.heartbeat("g", ShareHeartbeat("a", 2))
        assert quiet.assignment is None  # unchanged: not sent
        with pytest.raises(Refused) as fenced:
            await coordinator.heartbeat("g", ShareHeartbeat("a", 7))
        assert fenced.value.code == Code.FENCED_MEMBER_EPOCH
        with pytest.raises(Refused) as stranger:
            await coordinator.heartbeat("g", ShareHeartbeat("z", -1))  # leaving, unknown
        assert stranger.value.code == Code.UNKNOWN_MEMBER_ID
        coordinator.config.max_size = 2  # group.share.max.size
        with pytest.raises(Refused) as full:
            await coordinator.heartbeat("g", ShareHeartbeat("c", 0, topics=["t"]))
        assert full.value.code == Code.GROUP_MAX_SIZE_REACHED
        with pytest.raises(Refused) as unknown:
            await coordinator.heartbeat("g", ShareHeartbeat("z", 2))
        assert unknown.value.code == Code.UNKNOWN_MEMBER_ID
        # Without share.auto.offset.reset=earliest a new share-partition starts at the end.
        latest = await fetcher.fetch("g", "a", [("t", 0)], 0, 1, 1 << 20, 10)
        assert latest[("t", 0)].runs == []
        await coordinator.store.forget("g", [("t", 0)])
        await log.redis.hset(log.keys.group_configs("g"), "share.auto.offset.reset", "earliest")
        got = await fetcher.fetch("g", "a", [("t", 0)], 0, 1, 1 << 20, 10)
        assert got[("t", 0)].runs == [(0, 2, 1)]
        # b stops heartbeating, a goes on: b's session ends (its timer), a's records stay
        # a's; then a's session ends too and its records go back at once.
        await clock.advance(6)
        await coordinator.heartbeat("g", ShareHeartbeat("a", 2))
        await clock.advance(5)
        await coordinator.tick("g")
        group = await coordinator.load("g")
        assert group is not None and list(group.members) == ["a"]
        state = (await coordinator.store.states("g", [("t", 0)]))[("t", 0)]
        assert (state.acquired, state.available) == (3, 0)
        fetcher.sessions.open("g", "a", [("t", 0)])
        await clock.advance(6)
        await coordinator.tick("g")  # after the timer's tick, which holds the group's lock
        group = await coordinator.load("g")
        assert group is not None and group.state == "Empty"
        assert fetcher.sessions.get("g", "a") is None  # its share session went with it
        state = (await coordinator.store.states("g", [("t", 0)]))[("t", 0)]
        assert (state.acquired, state.available) == (0, 3)
        await log.redis.aclose()

    asyncio.run(scenario())


def test_read_committed_share_fetches_never_acquire_aborted_records(redis_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock(1_000_000)
        log, coordinator, fetcher = make(redis_url, clock)
        await log.create_topic(TopicConfig("tx", 1))
        await log.append("tx", 0, [build_batch([b"plain"])])  # offset 0
        for seq, commit in ((0, False), (1, True)):
            batch = build_batch(
                [b"t1", b"t2"],
                producer_id=9,
                producer_epoch=0,
                base_sequence=seq * 2,
                transactional=True,
            )
            await log.append("tx", 0, [batch])  # 1-2 (aborted), then 4-5 (committed)
            await log.end_transaction("tx", 0, 9, 0, commit=commit, transaction=seq + 1)
        configs = {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"}
        await log.redis.hset(log.keys.group_configs("g"), mapping=configs)
        await coordinator.heartbeat("g", ShareHeartbeat("m", 0, topics=["tx"]))
        got = await fetcher.fetch("g", "m", [("tx", 0)], 0, 1, 1 << 20, 100)
        # Markers (3, 6) and the aborted 1-2 are archived, never acquired.
        assert got[("tx", 0)].runs == [(0, 0, 1), (4, 5, 1)]
        accepted = await fetcher.acknowledge("g", "m", {("tx", 0): [(0, 0, [1]), (4, 5, [1])]})
        assert accepted == {("tx", 0): (0, "")}
        assert (fetcher.counts["acquired"], fetcher.counts["accepted"]) == (3, 3)  # metrics
        await fetcher.fetch("g", "m", [("tx", 0)], 0, 1, 1 << 20, 100)
        assert fetcher.in_flight[("g", "tx", 0)] == (0, 4)  # the aborted two, two markers
        state = (await coordinator.store.states("g", [("tx", 0)]))[("tx", 0)]
        assert (state.start, state.end, state.acquired) == (7, 7, 0)
        await log.redis.aclose()

    asyncio.run(scenario())
