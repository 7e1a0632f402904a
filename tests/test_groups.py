"""The group coordinator's rounds, errors and persistence, on fakeredis and a real Redis."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

import pytest

from kafkaesque.clock import SYSTEM, Clock, ManualClock
from kafkaesque.errors import Code, GroupBusy, HotTierUnavailable
from kafkaesque.groups.coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    decode_consumer_assignment,
)
from kafkaesque.groups.state import GroupState, JoinRequest
from kafkaesque.hot.log import Log
from tests.kafka_client import subscription

FAST = CoordinatorConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100)
PROTOCOLS = [("range", b"meta-range"), ("roundrobin", b"meta-rr")]


@pytest.fixture
def coordinator(make_log: Callable[[], Log]) -> Callable[..., GroupCoordinator]:
    """Builds a started coordinator inside the running loop (several may share one Redis)."""

    def build(config: CoordinatorConfig = FAST, clock: Clock = SYSTEM) -> GroupCoordinator:
        c = GroupCoordinator(make_log(), config, clock)
        c.start()
        return c

    return build


async def join(
    c: GroupCoordinator,
    member_id: str = "",
    *,
    instance: str | None = None,
    session_ms: int = 10_000,
    protocols=PROTOCOLS,
    known: bool = False,
):
    request = JoinRequest(
        member_id,
        instance,
        "client",
        "/127.0.0.1",
        session_ms,
        10_000,
        "consumer",
        protocols,
        known,
    )
    return await c.join("g", request)


def test_two_members_join_one_round_and_sync(coordinator) -> None:
    async def scenario() -> None:
        c = coordinator()
        first = await join(c)
        assert first.error == Code.NONE and first.generation == 1
        assert first.leader == first.member_id and first.member_id.startswith("client-")
        assert first.members == [(first.member_id, None, b"meta-range")]
        synced = await c.sync("g", 1, first.member_id, None, {first.member_id: b"all"})
        assert synced == (Code.NONE, b"all", "consumer", "range")
        # A second member triggers a rebalance; the first learns of it by heartbeat.
        second_join = asyncio.create_task(join(c))
        await asyncio.sleep(0.1)
        assert (await c.store.load("g")).state == GroupState.PREPARING
        assert await c.heartbeat("g", 1, first.member_id, None) == Code.REBALANCE_IN_PROGRESS
        first_again = await join(c, first.member_id)
        second = await second_join
        assert first_again.generation == second.generation == 2
        assert first_again.leader == first.member_id and len(first_again.members) == 2
        assert second.members == []  # only the leader gets the members
        assert (await c.store.load("g")).state == GroupState.COMPLETING
        # The follower waits for the leader's assignment.
        follower = asyncio.create_task(c.sync("g", 2, second.member_id, None, {}))
        await asyncio.sleep(0.05)
        assert not follower.done()
        leader = await c.sync(
            "g", 2, first.member_id, None, {first.member_id: b"A", second.member_id: b"B"}
        )
        assert leader[:2] == (Code.NONE, b"A")
        assert (await follower)[:2] == (Code.NONE, b"B")
        assert (await c.store.load("g")).state == GroupState.STABLE
        assert await c.heartbeat("g", 2, second.member_id, None) == Code.NONE
        await c.stop()

    asyncio.run(scenario())


def test_only_groups_with_members_are_ticked(coordinator) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        c = coordinator(clock=clock)
        active = c.store.keys.groups_active
        a = await join(c, session_ms=300)
        await c.sync("g", 1, a.member_id, None, {a.member_id: b"x"})
        assert await c.store.redis.smembers(active) == {b"g"}
        # A member that stops heartbeating is expired by the regular tick, not before its
        # session ends...
        await clock.advance(0.299)
        await c.tick_all()
        assert a.member_id in (await c.store.load("g")).members
        await clock.advance(0.002)
        await c.tick_all()
        assert not (await c.store.load("g")).members
        # ...and the empty group, its heartbeats gone, is not ticked again.
        assert await c.store.redis.smembers(active) == set()
        assert not await c.store.redis.exists(c.store.keys.group("g", ":heartbeats"))
        # A group with members missing from the set (written by an older version) is
        # found by the sweep, which lists it again.
        b = await join(c, session_ms=300)
        await c.sync("g", 3, b.member_id, None, {b.member_id: b"x"})
        await c.store.redis.srem(active, "g")
        await clock.advance(0.4)
        await c.tick_all()
        assert b.member_id in (await c.store.load("g")).members
        await c.tick_all(sweep=True)
        assert not (await c.store.load("g")).members
        await c.stop()

    asyncio.run(scenario())


def test_member_id_required_and_stale_requests(coordinator) -> None:
    async def scenario() -> None:
        c = coordinator()
        first = await join(c, known=True)
        assert first.error == Code.MEMBER_ID_REQUIRED and first.member_id
        joined = await join(c, first.member_id, known=True)
        assert joined.error == Code.NONE and joined.member_id == first.member_id
        assert (await join(c, "who-is-this")).error == Code.UNKNOWN_MEMBER_ID
        assert await c.heartbeat("g", 7, first.member_id, None) == Code.ILLEGAL_GENERATION
        assert await c.heartbeat("g", 1, "ghost", None) == Code.UNKNOWN_MEMBER_ID
        assert (await c.sync("g", 9, first.member_id, None, {}))[0] == Code.ILLEGAL_GENERATION
        other = await c.join(
            "g", JoinRequest("", None, "x", "", 10_000, 10_000, "connect", [("x", b"")], False)
        )
        assert other.error == Code.INCONSISTENT_GROUP_PROTOCOL
        no_common = await join(c, protocols=[("sticky", b"")])
        assert no_common.error == Code.INCONSISTENT_GROUP_PROTOCOL
        too_short = await c.join(
            "g", JoinRequest("", None, "x", "", 10, 10, "consumer", PROTOCOLS, False)
        )
        assert too_short.error == Code.INVALID_SESSION_TIMEOUT
        await c.stop()

    asyncio.run(scenario())


def test_expired_session_removes_member_and_rebalances(coordinator) -> None:
    async def scenario() -> None:
        c = coordinator()
        a = await join(c, session_ms=300)
        await c.sync("g", 1, a.member_id, None, {a.member_id: b"x"})
        b_join = asyncio.create_task(join(c, session_ms=10_000))
        await asyncio.sleep(0.1)
        # a never rejoins nor heartbeats: its session expires, and the round goes on without it.
        await asyncio.sleep(0.4)
        await c.tick("g")
        b = await asyncio.wait_for(b_join, 5)
        assert b.error == Code.NONE and b.leader == b.member_id
        group = await c.store.load("g")
        assert list(group.members) == [b.member_id] and group.generation == 2
        assert (await join(c, a.member_id)).error == Code.UNKNOWN_MEMBER_ID
        await c.stop()

    asyncio.run(scenario())


def test_static_member_rejoins_without_rebalance_and_fences_the_old_id(coordinator) -> None:
    async def scenario() -> None:
        c = coordinator()
        a = await join(c, instance="i-1")
        await c.sync("g", 1, a.member_id, None, {a.member_id: b"mine"})
        restarted = await join(c, instance="i-1")  # a new process, same instance id
        assert restarted.error == Code.NONE and restarted.member_id != a.member_id
        assert restarted.generation == 1 and (await c.store.load("g")).state == GroupState.STABLE
        synced = await c.sync("g", 1, restarted.member_id, "i-1", {})
        assert synced[:2] == (Code.NONE, b"mine")
        assert await c.heartbeat("g", 1, a.member_id, "i-1") == Code.FENCED_INSTANCE_ID
        assert (await join(c, a.member_id, instance="i-1")).error == Code.FENCED_INSTANCE_ID
        assert await c.leave("g", [("", "i-1")]) == [Code.NONE]
        assert (await c.store.load("g")).state == GroupState.EMPTY
        await c.stop()

    asyncio.run(scenario())


def test_leave_commit_and_delete(coordinator) -> None:
    async def scenario() -> None:
        c = coordinator()
        a = await join(c)
        await c.sync("g", 1, a.member_id, None, {})
        offsets = {("t", 0): (42, "meta", -1), ("t", 1): (7, None, -1)}
        assert await c.admin.commit("g", 1, a.member_id, None, offsets) == Code.NONE
        assert await c.admin.commit("g", 0, a.member_id, None, offsets) == Code.ILLEGAL_GENERATION
        assert await c.admin.commit("g", 1, "ghost", None, offsets) == Code.UNKNOWN_MEMBER_ID
        # Standalone commits (no member) are refused while the group has members.
        assert await c.admin.commit("g", -1, "", None, offsets) == Code.UNKNOWN_MEMBER_ID
        assert await c.admin.delete("g") == Code.NON_EMPTY_GROUP
        with pytest.raises(GroupBusy):
            await c.admin.reset_offsets("g", {("t", 0): 0})
        assert await c.leave("g", [(a.member_id, None)]) == [Code.NONE]
        assert await c.leave("g", [(a.member_id, None)]) == [Code.UNKNOWN_MEMBER_ID]
        committed = await c.admin.committed("g")
        assert {k: (v.offset, v.metadata) for k, v in committed.items()} == {
            ("t", 0): (42, "meta"),
            ("t", 1): (7, ""),
        }
        await c.admin.reset_offsets("g", {("t", 0): 5})
        assert (await c.admin.committed("g"))["t", 0].offset == 5
        assert await c.admin.list_groups() == ["g"]
        assert await c.admin.delete("g") == Code.NONE
        assert await c.admin.delete("g") == Code.GROUP_ID_NOT_FOUND
        assert await c.admin.committed("g") == {} and await c.admin.list_groups() == []
        await c.stop()

    asyncio.run(scenario())


def test_forget_topic_drops_its_offsets_in_every_group(coordinator) -> None:
    async def scenario() -> None:
        c = coordinator()
        both = {("t", 0): (4, "", -1), ("t", 1): (5, "", -1), ("t.other", 0): (6, "", -1)}
        for group in ("g1", "g2"):
            assert await c.admin.commit(group, -1, "", None, both) == Code.NONE
        assert await c.admin.forget_topic("t") == 4
        for group in ("g1", "g2"):
            assert list(await c.admin.committed(group)) == [("t.other", 0)]
        assert await c.admin.forget_topic("t") == 0
        await c.stop()

    asyncio.run(scenario())


def test_state_is_shared_by_coordinators_on_one_redis(coordinator) -> None:
    """Two brokers (or a restarted one) see the same groups, members and offsets."""

    async def scenario() -> None:
        one, two = coordinator(), coordinator()
        a = await join(one)
        await one.sync("g", 1, a.member_id, None, {a.member_id: b"x"})
        await one.admin.commit("g", 1, a.member_id, None, {("t", 0): (9, "", -1)})
        await one.stop()
        assert await two.heartbeat("g", 1, a.member_id, None) == Code.NONE
        assert (await two.admin.committed("g"))["t", 0].offset == 9
        # A member joining through the second broker rebalances the group for both.
        b_join = asyncio.create_task(join(two))
        await asyncio.sleep(0.1)
        a_again = await join(two, a.member_id)
        b = await b_join
        assert a_again.generation == b.generation == 2
        await two.stop()

    asyncio.run(scenario())


def test_initial_rebalance_delay_gathers_first_members(coordinator) -> None:
    async def scenario() -> None:
        c = coordinator(
            CoordinatorConfig(initial_rebalance_delay_ms=1500, min_session_timeout_ms=100)
        )
        results = await asyncio.gather(join(c), join(c), join(c))
        assert {r.generation for r in results} == {1}
        assert sum(1 for r in results if r.members) == 1  # one leader, knowing all three
        await c.stop()

    asyncio.run(scenario())


def test_decode_consumer_assignment() -> None:
    data = struct.pack(">hi", 0, 2)
    data += struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 3)
    data += struct.pack(">h", 2) + b"bc" + struct.pack(">i", 0)
    data += struct.pack(">i", -1)  # user data
    assert decode_consumer_assignment(data) == {"a": [0, 3], "bc": []}
    assert decode_consumer_assignment(b"\x00") is None


def test_offsets_expire_after_the_retention(make_log) -> None:
    """offsets.retention.minutes: a standalone group's offsets from their commit (then the
    group goes), a stable group's only for topics it does not read, an empty group's from
    when it became empty."""
    clock = ManualClock(1_000_000)
    minute = 60_000
    config = CoordinatorConfig(
        initial_rebalance_delay_ms=0, min_session_timeout_ms=100, offsets_retention_minutes=1
    )

    async def scenario() -> None:
        c = GroupCoordinator(make_log(), config, clock=clock)
        c.start()
        offsets = {("t", 0): (1, "", -1), ("u", 0): (2, "", -1)}
        assert await c.admin.commit("solo", -1, "", None, offsets) == Code.NONE
        a = await join(c, protocols=[("range", subscription(["t"]))])
        await c.sync("g", 1, a.member_id, None, {})
        assert await c.admin.commit("g", 1, a.member_id, None, offsets) == Code.NONE

        async def advance(ms: int) -> None:
            while ms > 0:  # the member heartbeats well within its 10 s session
                step = min(ms, 5_000)
                await clock.advance_ms(step)
                ms -= step
                await c.heartbeat("g", 1, a.member_id, None)
            await c.tick_all(sweep=True)

        await advance(minute - 1)
        assert len(await c.admin.committed("solo")) == 2 and len(await c.admin.committed("g")) == 2
        await advance(1)
        assert await c.admin.list_groups() == ["g"]  # solo's offsets expired, and solo with them
        assert list(await c.admin.committed("g")) == [("t", 0)]  # the member reads t
        assert await c.leave("g", [(a.member_id, None)]) == [Code.NONE]
        await advance(minute - 1)
        assert list(await c.admin.committed("g")) == [("t", 0)]  # empty for less than a minute
        await advance(1)
        assert await c.admin.committed("g") == {} and await c.admin.list_groups() == []
        await c.stop()

    asyncio.run(scenario())


def test_a_lock_that_stays_taken_is_retriable(coordinator) -> None:
    """A group's lock held past the blocking timeout (its holder stalled on a paused
    primary): HotTierUnavailable, which clients retry, not an internal error."""

    async def run() -> None:
        c = coordinator()
        held = c.store.lock("g")
        await held.acquire()
        waiting = c.store.lock("g")
        waiting.blocking_timeout = 0.1
        with pytest.raises(HotTierUnavailable, match="stayed taken"):
            async with waiting:
                pass
        await held.release()
        async with c.store.lock("g"):  # free again
            pass
        await c.stop()

    asyncio.run(run())
