"""The consumer-protocol coordinator on fakeredis and a real Redis: what the classic group
APIs see of consumer groups (listing, DescribeGroups' view, DeleteGroups) and the hooks
the classic coordinator calls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace

from kio.schema.describe_groups.v4.response import DescribedGroup, DescribedGroupMember

from kafkaesque.clock import ManualClock
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import Code
from kafkaesque.groups.consumer import ConsumerGroupCoordinator
from kafkaesque.groups.consumer_state import Heartbeat
from kafkaesque.groups.coordinator import CoordinatorConfig, GroupCoordinator
from kafkaesque.groups.state import JoinRequest
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import Partitions
from kafkaesque.txn.coordinator import TransactionCoordinator
from tests.kafka_client import decode_assignment
from wire.group_answers import described_as_classic


def test_classic_views_delete_and_hooks(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 3))
        consumer = ConsumerGroupCoordinator(log)
        classic = GroupCoordinator(log, CoordinatorConfig(initial_rebalance_delay_ms=0))
        classic.start()
        joined = await consumer.heartbeat(
            "cg", Heartbeat("m", 0, rebalance_timeout_ms=1000, topics=["t"], client_id="c"), 1
        )
        assert await consumer.listing(["cg", "nope"]) == {"cg": "Stable"}
        assert "cg" in await classic.admin.list_groups()

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
        assert (
            await classic.admin.commit("cg", joined.epoch, "m", None, {("t", 0): (4, "", -1)}) == 0
        )
        stale = await classic.admin.commit(
            "cg", joined.epoch + 1, "m", None, {("t", 0): (5, "", -1)}
        )
        assert stale == Code.STALE_MEMBER_EPOCH
        request = JoinRequest("", None, "c", "/h", 10_000, 10_000, "consumer", [("r", b"")], False)
        refused = await classic.join("cg", request)
        assert refused.error == Code.INCONSISTENT_GROUP_PROTOCOL

        assert await consumer.delete("cg") == Code.NON_EMPTY_GROUP
        await consumer.heartbeat("cg", Heartbeat("m", -1), 1)
        assert await consumer.delete("cg") == Code.NONE
        assert await consumer.delete("cg") is None  # no longer a consumer group
        assert "cg" not in await classic.admin.list_groups()
        assert await classic.admin.committed("cg") == {}
        await classic.stop()

    asyncio.run(scenario())


def test_offsets_of_a_consumer_group_expire_after_the_retention(
    make_log: Callable[[], Log],
) -> None:
    """offsets.retention.minutes for a consumer group (KIP-848), as Kafka's coordinator:
    offsets of topics no member subscribes to expire that long after their commit; an
    empty group's all do, and the group goes with them."""
    minute = 60_000
    clock = ManualClock(1_000_000)

    async def scenario() -> None:
        log = make_log()
        for name in ("t", "u"):
            await log.create_topic(TopicConfig(name, 1))
        consumer = ConsumerGroupCoordinator(log)
        config = CoordinatorConfig(initial_rebalance_delay_ms=0, offsets_retention_minutes=1)
        classic = GroupCoordinator(log, config, clock=clock)
        member = Heartbeat("m", 0, rebalance_timeout_ms=1000, topics=["t"])
        joined = await consumer.heartbeat("cg", member, 1)
        offsets = {("t", 0): (4, "", -1), ("u", 0): (7, "", -1)}
        assert await classic.admin.commit("cg", joined.epoch, "m", None, offsets) == 0
        await clock.advance_ms(minute - 1)
        await classic.tick_all(sweep=True)
        assert set(await classic.admin.committed("cg")) == {("t", 0), ("u", 0)}
        await clock.advance_ms(1)
        await classic.tick_all(sweep=True)
        assert set(await classic.admin.committed("cg")) == {("t", 0)}  # the member reads t
        await consumer.heartbeat("cg", Heartbeat("m", -1), 1)  # leaves: the group is empty
        await classic.tick_all(sweep=True)
        assert "cg" not in await classic.admin.list_groups()
        assert await classic.admin.committed("cg") == {} and await consumer.load("cg") is None

    asyncio.run(scenario())


def test_offsets_pending_on_a_transaction_keep_their_group(make_log: Callable[[], Log]) -> None:
    """An empty group whose only offsets are pending on an open transaction (TxnOffsetCommit)
    is not dropped by the sweep, nor are such partitions' committed offsets expired, as in
    Kafka: the commit would land in a group no index lists, never archived, never expired."""
    minute = 60_000
    clock = ManualClock(1_000_000)

    async def scenario() -> None:
        log = make_log()
        await log.ensure_recovered()
        await log.create_topic(TopicConfig("t", 2))
        consumer = ConsumerGroupCoordinator(log)
        config = CoordinatorConfig(initial_rebalance_delay_ms=0, offsets_retention_minutes=1)
        classic = GroupCoordinator(log, config, clock=clock)
        txns = TransactionCoordinator(log, Partitions(log), classic, clock=clock)
        init = await txns.init_producer("tx", 600_000)
        pid, epoch = init.producer_id, init.producer_epoch
        # A consumer group (KIP-848) with nothing committed, and a classic one whose
        # committed offset of t-1 is past its retention.
        joined = await consumer.heartbeat(
            "cg", Heartbeat("m", 0, rebalance_timeout_ms=1000, topics=["t"]), 1
        )
        assert await classic.admin.commit("solo", -1, "", None, {("t", 1): (3, "", -1)}) == 0
        for group in ("cg", "solo"):
            assert await txns.add_offsets("tx", pid, epoch, group) == Code.NONE
        member = {"cg": (joined.epoch, "m"), "solo": (-1, "")}
        for group, (generation, member_id) in member.items():
            codes = await txns.commit_offsets(
                "tx", group, pid, epoch, {("t", 1): (5, None, -1)}, generation, member_id
            )
            assert codes == {("t", 1): 0}
        await consumer.heartbeat("cg", Heartbeat("m", -1), 1)  # the member leaves
        await clock.advance_ms(2 * minute)
        await classic.tick_all(sweep=True)
        assert {"cg", "solo"} <= set(await classic.admin.list_groups()), (
            "dropped with offsets pending"
        )
        assert (await classic.admin.committed("solo"))[("t", 1)].offset == 3  # not expired
        assert await txns.end("tx", pid, epoch, True) == Code.NONE
        for group in ("cg", "solo"):
            assert (await classic.admin.committed(group))[("t", 1)].offset == 5
        snapshot = await classic.admin.offsets.snapshot()
        assert snapshot is not None and {"cg", "solo"} <= set(snapshot.groups)

    asyncio.run(scenario())


async def txn_setup(make_log: Callable[[], Log], clock: ManualClock):
    log = make_log()
    await log.ensure_recovered()
    await log.create_topic(TopicConfig("t", 2))
    config = CoordinatorConfig(initial_rebalance_delay_ms=0, offsets_retention_minutes=1)
    classic = GroupCoordinator(log, config, clock=clock)
    txns = TransactionCoordinator(log, Partitions(log), classic, clock=clock)
    return classic, txns


async def pending(txns: TransactionCoordinator, txn_id: str, group: str) -> tuple[int, int]:
    """An open transaction of ``txn_id`` with offset 5 of t-0 pending for ``group``."""
    init = await txns.init_producer(txn_id, 600_000)
    pid, epoch = init.producer_id, init.producer_epoch
    assert await txns.add_offsets(txn_id, pid, epoch, group) == Code.NONE
    codes = await txns.commit_offsets(txn_id, group, pid, epoch, {("t", 0): (5, None, -1)})
    assert codes == {("t", 0): 0}
    return pid, epoch


def test_deleted_group_gets_no_offsets_from_a_later_commit(make_log: Callable[[], Log]) -> None:
    """DeleteGroups while a transaction holds offsets for the group deletes the pending
    offsets with it, as Kafka does: the transaction's commit brings back nothing (else
    offsets of a group no index lists: never expired, never archived)."""
    clock = ManualClock(1_000_000)

    async def scenario() -> None:
        classic, txns = await txn_setup(make_log, clock)
        assert await classic.admin.commit("g", -1, "", None, {("t", 1): (3, "", -1)}) == 0
        pid, epoch = await pending(txns, "tx", "g")
        assert await classic.admin.delete("g") == Code.NONE
        assert await classic.admin.committed("g") == {}
        assert await txns.end("tx", pid, epoch, True) == Code.NONE
        left = await classic.admin.committed("g")
        listed = "g" in await classic.admin.list_groups()
        assert left == {}, (
            f"a deleted group has offsets again: {left}; listed: {listed}; "
            f"DeleteGroups now answers {await classic.admin.delete('g')!r}"
        )

    asyncio.run(scenario())


def test_offsets_committed_to_a_new_group_by_a_transaction_are_indexed(
    make_log: Callable[[], Log],
) -> None:
    """TxnOffsetCommit for a group id not seen before (sendOffsetsToTransaction with the
    group metadata of an assign()-ing consumer, generation -1) creates the group at the
    commit, as Kafka does: listed, in the archive's snapshot, expired in time."""
    clock = ManualClock(1_000_000)

    async def scenario() -> None:
        classic, txns = await txn_setup(make_log, clock)
        pid, epoch = await pending(txns, "tx", "fresh")
        assert await txns.end("tx", pid, epoch, True) == Code.NONE
        assert (await classic.admin.committed("fresh"))[("t", 0)].offset == 5
        snapshot = await classic.admin.offsets.snapshot()
        assert snapshot is not None
        assert "fresh" in await classic.admin.list_groups(), (
            "committed offsets of an unlisted group"
        )
        assert "fresh" in snapshot.groups, "committed offsets the archive never takes"

    asyncio.run(scenario())


def test_a_transactional_id_with_a_nul_does_not_stop_the_sweep(
    make_log: Callable[[], Log],
) -> None:
    """Kafka puts no rule on transactional.id's characters: one holding NUL (the pending
    field's separator) neither breaks the sweep nor settles another id's offsets."""
    clock = ManualClock(1_000_000)

    async def scenario() -> None:
        classic, txns = await txn_setup(make_log, clock)
        assert await classic.admin.commit("a-group", -1, "", None, {("t", 1): (3, "", -1)}) == 0
        await pending(txns, "app\0one", "a-group")
        assert await classic.admin.commit("z-group", -1, "", None, {("t", 1): (3, "", -1)}) == 0
        await clock.advance_ms(10 * 60_000)
        await classic.tick_all(sweep=True)  # raised ValueError: too many values to unpack
        assert "z-group" not in await classic.admin.list_groups()  # expired, as the sweep should

    asyncio.run(scenario())


def test_deleted_consumer_group_gets_no_offsets_from_a_later_commit(
    make_log: Callable[[], Log],
) -> None:
    """As test_deleted_group_gets_no_offsets_from_a_later_commit, for a consumer group
    (KIP-848): its DeleteGroups drops the offsets pending on a transaction too."""
    clock = ManualClock(1_000_000)

    async def scenario() -> None:
        classic, txns = await txn_setup(make_log, clock)
        consumer = ConsumerGroupCoordinator(txns.log)
        await consumer.heartbeat(
            "cg", Heartbeat("m", 0, rebalance_timeout_ms=1000, topics=["t"], client_id="c"), 1
        )
        pid, epoch = await pending(txns, "tx", "cg")
        await consumer.heartbeat("cg", Heartbeat("m", -1), 1)  # leaves: empty
        assert await classic.admin.delete("cg") == Code.GROUP_ID_NOT_FOUND  # the handler's order
        assert await consumer.delete("cg") == Code.NONE
        assert await classic.admin.committed("cg") == {}
        assert await txns.end("tx", pid, epoch, True) == Code.NONE
        left = await classic.admin.committed("cg")
        assert left == {}, f"a deleted consumer group has offsets again: {left}"

    asyncio.run(scenario())


def test_delete_while_a_transaction_settles_leaves_no_offsets(
    make_log: Callable[[], Log],
) -> None:
    """A DeleteGroups racing a transaction's commit for the group (another broker's):
    either the group is gone with its offsets, or it is listed with them; never offsets
    of a group no index lists (never expired, never archived)."""
    clock = ManualClock(1_000_000)

    async def scenario() -> None:
        classic, txns = await txn_setup(make_log, clock)
        pid, epoch = await pending(txns, "tx", "g")
        real_write = classic.admin.offsets.write

        async def write_then_delete(group_id, offsets):  # type: ignore[no-untyped-def]
            deleting = asyncio.create_task(classic.admin.delete(group_id))
            await asyncio.sleep(0.05)  # it waits for the group's lock, held by the settle
            await real_write(group_id, offsets)
            assert not deleting.done()
            await asyncio.sleep(0)

        classic.admin.offsets.write = write_then_delete  # type: ignore[method-assign]
        assert await txns.end("tx", pid, epoch, True) == Code.NONE
        left = await classic.admin.committed("g")
        listed = "g" in await classic.admin.list_groups()
        assert left == {} or listed, f"offsets of an unlisted (deleted) group: {left}"

    asyncio.run(scenario())


def test_a_sweep_while_a_transaction_settles_keeps_the_committed_offsets(
    make_log: Callable[[], Log],
) -> None:
    """A sweep racing a transaction's commit for a new group id never sees the offsets
    neither pending nor committed, so it never drops the group with offsets just
    committed."""
    clock = ManualClock(1_000_000)

    async def scenario() -> None:
        classic, txns = await txn_setup(make_log, clock)
        pid, epoch = await pending(txns, "tx", "fresh")
        real_write = classic.admin.offsets.write
        sweeps: list[asyncio.Task[None]] = []

        async def write_under_a_sweep(group_id, offsets):  # type: ignore[no-untyped-def]
            sweeps.append(asyncio.create_task(classic.tick(group_id, sweep=True)))
            await asyncio.sleep(0.05)  # the sweep waits for the group's lock
            await real_write(group_id, offsets)

        classic.admin.offsets.write = write_under_a_sweep  # type: ignore[method-assign]
        assert await txns.end("tx", pid, epoch, True) == Code.NONE
        await asyncio.gather(*sweeps)
        assert ("t", 0) in await classic.admin.committed("fresh")
        assert "fresh" in await classic.admin.list_groups()

    asyncio.run(scenario())


def test_a_topic_name_with_a_nul_is_settled_by_its_own_transaction(
    make_log: Callable[[], Log],
) -> None:
    """TxnOffsetCommit for a topic that does not exist (a name holding NUL, the pending
    field's separator, among them) is UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers."""
    clock = ManualClock(1_000_000)

    async def scenario() -> None:
        _, txns = await txn_setup(make_log, clock)
        init = await txns.init_producer("tx", 600_000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await txns.add_offsets("tx", pid, epoch, "g") == Code.NONE
        codes = await txns.commit_offsets("tx", "g", pid, epoch, {("a\0b", 0): (5, None, -1)})
        assert codes == {("a\0b", 0): Code.UNKNOWN_TOPIC_OR_PARTITION}
        assert await txns.end("tx", pid, epoch, True) == Code.NONE
        assert await txns.pending_offsets("g") == set()

    asyncio.run(scenario())
