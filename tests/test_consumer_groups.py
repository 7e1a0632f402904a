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
from kafkaesque.partitions import Partitions
from kafkaesque.topic_config import TopicConfig
from kafkaesque.transactions import TxnError
from kafkaesque.txn_store import TransactionCoordinator
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


def test_offsets_pending_on_a_transaction_keep_their_group(make_log: Callable[[], Log]) -> None:
    """An empty group whose only offsets are pending on an open transaction (TxnOffsetCommit)
    is not dropped by the sweep, nor are such partitions' committed offsets expired, as in
    Kafka: the commit would land in a group no index lists, never archived, never expired."""
    minute = 60_000
    now = [1_000_000]

    async def scenario() -> None:
        log = make_log()
        await log.ensure_recovered()
        await log.create_topic(TopicConfig("t", 2))
        consumer = ConsumerGroupCoordinator(log)
        config = CoordinatorConfig(initial_rebalance_delay_ms=0, offsets_retention_minutes=1)
        classic = GroupCoordinator(log.redis, config, clock=lambda: now[0])
        txns = TransactionCoordinator(log, Partitions(log), classic, clock=lambda: now[0])
        init = await txns.init_producer("tx", 600_000)
        pid, epoch = init.producer_id, init.producer_epoch
        # A consumer group (KIP-848) with nothing committed, and a classic one whose
        # committed offset of t-1 is past its retention.
        joined = await consumer.heartbeat(
            "cg", Heartbeat("m", 0, rebalance_timeout_ms=1000, topics=["t"]), 1
        )
        assert await classic.commit("solo", -1, "", None, {("t", 1): (3, "", -1)}) == 0
        for group in ("cg", "solo"):
            assert await txns.add_offsets("tx", pid, epoch, group) == TxnError.NONE
        member = {"cg": (joined.epoch, "m"), "solo": (-1, "")}
        for group, (generation, member_id) in member.items():
            codes = await txns.commit_offsets(
                "tx", group, pid, epoch, {("t", 1): (5, None, -1)}, generation, member_id
            )
            assert codes == {("t", 1): 0}
        await consumer.heartbeat("cg", Heartbeat("m", -1), 1)  # the member leaves
        now[0] += 2 * minute
        await classic.tick_all(sweep=True)
        assert {"cg", "solo"} <= set(await classic.list_groups()), "dropped with offsets pending"
        assert (await classic.committed("solo"))[("t", 1)].offset == 3  # not expired
        assert await txns.end("tx", pid, epoch, True) == TxnError.NONE
        for group in ("cg", "solo"):
            assert (await classic.committed(group))[("t", 1)].offset == 5
        snapshot = await classic.offsets.snapshot()
        assert snapshot is not None and {"cg", "solo"} <= set(snapshot.groups)

    asyncio.run(scenario())
