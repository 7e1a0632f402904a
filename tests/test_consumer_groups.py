"""The consumer-protocol coordinator on fakeredis and a real Redis: what the classic group
APIs see of consumer groups (listing, DescribeGroups' view, DeleteGroups) and the hooks
the classic coordinator calls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace

from kio.schema.describe_groups.v4.response import DescribedGroup, DescribedGroupMember

from kafkaesque.consumer_group import ConsumerGroupCoordinator
from kafkaesque.consumer_group_state import ConsumerGroupError, Heartbeat
from kafkaesque.group_state import GroupError, JoinRequest
from kafkaesque.groups import CoordinatorConfig, GroupCoordinator
from kafkaesque.log import Log
from kafkaesque.topic_config import TopicConfig
from tests.kafka_client import decode_assignment
from wire.handlers.consumer_groups import described_as_classic


def test_classic_views_delete_and_hooks(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 3))
        consumer = ConsumerGroupCoordinator(log)
        classic = GroupCoordinator(log.redis, CoordinatorConfig(initial_rebalance_delay_ms=0))
        classic.start()
        joined = await consumer.heartbeat(
            "cg", Heartbeat("m", 0, rebalance_timeout_ms=1000, topics=["t"], client_id="c"), 1
        )
        assert await consumer.listing(["cg", "nope"]) == {"cg": "Stable"}
        assert "cg" in await classic.list_groups()

        broker = SimpleNamespace(consumer_groups=consumer)
        view = await described_as_classic(broker, "cg", DescribedGroup, DescribedGroupMember)
        assert (view.protocol_type, view.group_state, view.protocol_data) == (
            "consumer",
            "Stable",
            "uniform",
        )
        (member,) = view.members
        assert member.client_id == "c"
        assert decode_assignment(member.member_assignment) == {"t": [0, 1, 2]}
        assert (
            await described_as_classic(broker, "nope", DescribedGroup, DescribedGroupMember) is None
        )

        # The classic coordinator: member epochs for commits, no classic members.
        assert await classic.commit("cg", joined.epoch, "m", None, {("t", 0): (4, "", -1)}) == 0
        stale = await classic.commit("cg", joined.epoch + 1, "m", None, {("t", 0): (5, "", -1)})
        assert stale == ConsumerGroupError.STALE_MEMBER_EPOCH
        request = JoinRequest("", None, "c", "/h", 10_000, 10_000, "consumer", [("r", b"")], False)
        refused = await classic.join("cg", request)
        assert refused.error == GroupError.INCONSISTENT_GROUP_PROTOCOL

        assert await consumer.delete("cg") == ConsumerGroupError.NON_EMPTY_GROUP
        await consumer.heartbeat("cg", Heartbeat("m", -1), 1)
        assert await consumer.delete("cg") == ConsumerGroupError.NONE
        assert await consumer.delete("cg") is None  # no longer a consumer group
        assert "cg" not in await classic.list_groups()
        assert await classic.committed("cg") == {}
        await classic.stop()

    asyncio.run(scenario())


def test_offsets_of_a_consumer_group_expire_after_the_retention(
    make_log: Callable[[], Log],
) -> None:
    """offsets.retention.minutes for a consumer group (KIP-848), as Kafka's coordinator:
    offsets of topics no member subscribes to expire that long after their commit; an
    empty group's all do, and the group goes with them."""
    minute = 60_000
    now = [0]

    async def scenario() -> None:
        log = make_log()
        for name in ("t", "u"):
            await log.create_topic(TopicConfig(name, 1))
        consumer = ConsumerGroupCoordinator(log)
        config = CoordinatorConfig(initial_rebalance_delay_ms=0, offsets_retention_minutes=1)
        classic = GroupCoordinator(log.redis, config, clock=lambda: now[0])
        now[0] = 1_000_000
        member = Heartbeat("m", 0, rebalance_timeout_ms=1000, topics=["t"])
        joined = await consumer.heartbeat("cg", member, 1)
        offsets = {("t", 0): (4, "", -1), ("u", 0): (7, "", -1)}
        assert await classic.commit("cg", joined.epoch, "m", None, offsets) == 0
        now[0] += minute - 1
        await classic.tick_all(sweep=True)
        assert set(await classic.committed("cg")) == {("t", 0), ("u", 0)}
        now[0] += 1
        await classic.tick_all(sweep=True)
        assert set(await classic.committed("cg")) == {("t", 0)}  # the member reads t
        await consumer.heartbeat("cg", Heartbeat("m", -1), 1)  # leaves: the group is empty
        await classic.tick_all(sweep=True)
        assert "cg" not in await classic.list_groups()
        assert await classic.committed("cg") == {} and await consumer.load("cg") is None

    asyncio.run(scenario())
