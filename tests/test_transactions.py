"""The transaction coordinator: its state machine (no I/O), and its store on fakeredis and a
real Redis with a fake marker writer: fencing, epochs, ending, roll-forward after a broker
died between prepare and complete, timeouts, expiry, pending offsets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

import pytest

from kafkaesque.clock import ManualClock
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import (
    Code,
    HotTierUnavailable,
    InvalidProducerEpoch,
    KafkaesqueError,
    TransactionNotOpen,
)
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import Partitions
from kafkaesque.records.build import build_batch
from kafkaesque.txn.coordinator import TransactionCoordinator
from kafkaesque.txn.transaction import MAX_EPOCH, Transaction, TxnConfig, TxnMarker, TxnState


# -- the state machine ------------------------------------------------------------------------
def test_init_bumps_and_fences() -> None:
    txn = Transaction("t", 5)
    assert txn.bump(1000, None, now=1) == Code.NONE and txn.producer_epoch == 0
    assert txn.bump(1000, None, now=2) == Code.NONE and txn.producer_epoch == 1
    # KIP-360: the current epoch recovering is bumped; a retry of that bump gets it again.
    assert txn.bump(1000, 1, now=3) == Code.NONE and txn.producer_epoch == 2
    assert txn.bump(1000, 1, now=4) == Code.NONE and txn.producer_epoch == 2
    assert txn.bump(1000, 0, now=5) == Code.PRODUCER_FENCED
    assert txn.init_error((6, 2)) == Code.PRODUCER_FENCED  # another producer id


def test_exhausted_epoch_rotates_the_id() -> None:
    txn = Transaction("t", 5, producer_epoch=MAX_EPOCH - 1)
    assert txn.needs_new_id(None)
    txn.rotate(9, 1000, now=1, keep_last=True)
    assert (txn.producer_id, txn.producer_epoch, txn.last_producer_id) == (9, 0, 5)
    # The old producer retrying its bump with the exhausted epoch is not fenced.
    assert txn.init_error((5, MAX_EPOCH - 1)) == Code.NONE


def test_end_states() -> None:
    txn = Transaction("t", 5, producer_epoch=0)
    assert txn.end(5, 0, True, now=1) == Code.INVALID_TXN_STATE  # Empty
    assert txn.add(5, 0, 2, partitions={("a", 0)}) == Code.NONE
    assert (txn.state, txn.start_ms) == (TxnState.ONGOING, 2)
    assert txn.end(5, 1, True, now=3) == Code.PRODUCER_FENCED
    assert txn.end(6, 0, True, now=3) == Code.INVALID_PRODUCER_ID_MAPPING
    assert txn.end(5, 0, True, now=3) == Code.NONE and txn.state == TxnState.PREPARE_COMMIT
    assert txn.end(5, 0, True, now=4) == Code.CONCURRENT_TRANSACTIONS
    assert txn.end(5, 0, False, now=4) == Code.INVALID_TXN_STATE
    assert txn.add(5, 0, 4, partitions={("a", 1)}) == Code.CONCURRENT_TRANSACTIONS
    txn.complete(now=5)
    assert (txn.state, txn.partitions) == (TxnState.COMPLETE_COMMIT, set())
    assert txn.end(5, 0, True, now=6) == Code.NONE  # a retry
    assert txn.end(5, 0, False, now=6) == Code.INVALID_TXN_STATE


def test_timeout_config() -> None:
    config = TxnConfig(max_timeout_ms=1000)
    assert config.timeout_error(1000) == Code.NONE
    assert config.timeout_error(1001) == Code.INVALID_TRANSACTION_TIMEOUT
    assert config.timeout_error(0) == Code.INVALID_TRANSACTION_TIMEOUT


# -- the coordinator over Redis -------------------------------------------------------------
class Markers:
    """Records the markers asked for; ``fail`` makes every partition fail."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[tuple[str, int]], int, int, bool]] = []
        self.fail = False
        # Partitions whose producer has a newer epoch than the markers'.
        self.newer: set[tuple[str, int]] = set()

    async def write_markers(
        self,
        partitions: Iterable[tuple[str, int]],
        marker: TxnMarker,
    ) -> dict[tuple[str, int], KafkaesqueError | None]:
        wanted = list(partitions)
        self.calls.append((wanted, marker.producer_id, marker.producer_epoch, marker.commit))
        error = HotTierUnavailable("down") if self.fail else None
        newer = InvalidProducerEpoch("marker epoch older than the producer epoch")
        return {tp: newer if tp in self.newer else error for tp in wanted}


def run(scenario: Callable) -> Callable:
    """A test running the async ``scenario`` in its own event loop."""

    def test(setup: Callable) -> None:
        asyncio.run(scenario(setup))

    test.__name__ = scenario.__name__
    return test


@pytest.fixture
def setup(make_log: Callable[[], Log]) -> Callable:
    async def build(clock: ManualClock | None = None) -> tuple[TransactionCoordinator, Markers]:
        log = make_log()
        await log.ensure_recovered()
        await log.create_topic(TopicConfig("a", 2))
        markers = Markers()
        clock = clock or ManualClock(1_000_000)
        groups = GroupCoordinator(log)
        coordinator = TransactionCoordinator(
            log, markers, groups, TxnConfig(id_expiration_ms=10_000), clock=clock
        )
        return coordinator, markers

    return build


@run
async def test_commit_writes_markers_and_offsets(setup) -> None:
    c, markers = await setup()
    init = await c.init_producer("t", 60_000)
    pid, epoch = init.producer_id, init.producer_epoch
    assert (init.error, epoch) == (Code.NONE, 0)
    assert await c.add_partitions("t", pid, epoch, [("a", 0), ("a", 1)]) == {
        ("a", 0): Code.NONE,
        ("a", 1): Code.NONE,
    }
    assert await c.add_offsets("t", pid, epoch, "g") == Code.NONE
    codes = await c.commit_offsets("t", "g", pid, epoch, {("a", 0): (4, "m", -1)})
    assert codes == {("a", 0): Code.NONE}
    assert await c.pending_offsets("g") == {("a", 0)}
    assert await c.groups.admin.offsets.read("g") == {}
    assert await c.end("t", pid, epoch, True) == Code.NONE
    assert markers.calls == [([("a", 0), ("a", 1)], pid, epoch, True)]
    assert (await c.groups.admin.offsets.read("g"))[("a", 0)].offset == 4
    assert await c.pending_offsets("g") == set()
    assert (await c.states.load("t")).state == TxnState.COMPLETE_COMMIT


@run
async def test_unknown_partition_fails_the_request(setup) -> None:
    c, _ = await setup()
    init = await c.init_producer("t", 60_000)
    outcome = await c.add_partitions("t", init.producer_id, 0, [("a", 0), ("a", 2), ("b", 0)])
    assert outcome == {
        ("a", 0): Code.OPERATION_NOT_ATTEMPTED,
        ("a", 2): Code.UNKNOWN_TOPIC_OR_PARTITION,
        ("b", 0): Code.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert (await c.states.load("t")).state == TxnState.EMPTY


@run
async def test_new_instance_aborts_and_fences(setup) -> None:
    c, markers = await setup()
    first = await c.init_producer("t", 60_000)
    await c.add_partitions("t", first.producer_id, 0, [("a", 0)])
    second = await c.init_producer("t", 60_000)
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 2)
    assert markers.calls == [([("a", 0)], first.producer_id, 1, False)]  # the fenced epoch
    assert await c.end("t", first.producer_id, 0, True) == Code.PRODUCER_FENCED


@run
async def test_prepared_commit_rolls_forward(setup) -> None:
    """The broker died after PrepareCommit was saved (the markers failed here): the
    outcome stays commit, and the periodic tick finishes it."""
    c, markers = await setup()
    init = await c.init_producer("t", 60_000)
    pid = init.producer_id
    await c.add_partitions("t", pid, 0, [("a", 1)])
    await c.add_offsets("t", pid, 0, "g")
    await c.commit_offsets("t", "g", pid, 0, {("a", 1): (9, None, -1)})
    markers.fail = True
    assert await c.end("t", pid, 0, True) == Code.NONE
    assert (await c.states.load("t")).state == TxnState.PREPARE_COMMIT
    assert await c.add_partitions("t", pid, 0, [("a", 0)]) == {
        ("a", 0): Code.CONCURRENT_TRANSACTIONS
    }
    markers.fail = False
    await c.completion.tick()
    assert (await c.states.load("t")).state == TxnState.COMPLETE_COMMIT
    assert markers.calls[-1] == ([("a", 1)], pid, 0, True)
    assert (await c.groups.admin.offsets.read("g"))[("a", 1)].offset == 9


@run
async def test_a_partition_past_the_markers_epoch_does_not_hold_the_transaction(setup) -> None:
    """A partition whose producer already has a newer epoch refuses the markers (as
    Kafka's does): the producer moved on there, so the transaction completes instead of
    retrying for ever (seen after a failover: InitProducerId answered
    CONCURRENT_TRANSACTIONS until the client gave up)."""
    c, markers = await setup()
    init = await c.init_producer("t", 60_000)
    pid = init.producer_id
    await c.add_partitions("t", pid, 0, [("a", 0), ("a", 1)])
    markers.newer = {("a", 1)}
    assert await c.end("t", pid, 0, False) == Code.NONE
    assert (await c.states.load("t")).state == TxnState.COMPLETE_ABORT
    assert (await c.init_producer("t", 60_000)).error == Code.NONE


@run
async def test_timeout_aborts_then_expiry_forgets(setup) -> None:
    clock = ManualClock(1_000_000)
    c, markers = await setup(clock)
    init = await c.init_producer("t", 1000)
    pid = init.producer_id
    await c.add_partitions("t", pid, 0, [("a", 0)])
    await c.add_offsets("t", pid, 0, "g")
    await c.commit_offsets("t", "g", pid, 0, {("a", 0): (1, None, -1)})
    await clock.advance_ms(999)
    await c.completion.tick()
    assert (await c.states.load("t")).state == TxnState.ONGOING
    await clock.advance_ms(2)
    await c.completion.tick()
    txn = await c.states.load("t")
    assert (txn.state, txn.producer_epoch) == (TxnState.COMPLETE_ABORT, 1)
    assert markers.calls == [([("a", 0)], pid, 1, False)]
    assert await c.pending_offsets("g") == set()  # dropped, not committed
    assert await c.groups.admin.offsets.read("g") == {}
    assert await c.end("t", pid, 0, True) == Code.PRODUCER_FENCED
    await clock.advance_ms(10_001)
    await c.completion.tick(sweep=True)
    assert await c.states.load("t") is None
    assert (await c.listing()).transactions == []


@run
async def test_listing_filters(setup) -> None:
    clock = ManualClock(1_000_000)
    c, _ = await setup(clock)
    a = await c.init_producer("a-1", 60_000)
    await c.init_producer("b-1", 60_000)
    await c.add_partitions("a-1", a.producer_id, 0, [("a", 0)])
    await clock.advance_ms(500)
    assert [t.transactional_id for t in (await c.listing()).transactions] == ["a-1", "b-1"]
    assert [t.transactional_id for t in (await c.listing(["Ongoing"])).transactions] == ["a-1"]
    assert [t.transactional_id for t in (await c.listing(pattern="b-.*")).transactions] == ["b-1"]
    assert [
        t.transactional_id for t in (await c.listing(producer_ids=[a.producer_id])).transactions
    ] == ["a-1"]
    # Running longer than 400 ms: a-1; an idle id (no start time) counts as Kafka counts it.
    assert (await c.listing(["Ongoing"], duration_ms=400)).transactions[0].transactional_id == "a-1"
    assert (await c.listing(["Ongoing"], duration_ms=600)).transactions == []
    assert (await c.listing(["Nope"])).unknown_states == ["Nope"]


# -- a Produce verified, then overtaken by its transaction's end ------------------------------
def txn_batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    return build_batch(
        [value], producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True
    )


def test_a_batch_verified_before_its_transaction_ended_is_refused(make_log) -> None:
    """Produce checks the transaction, then appends: an EndTxn between the two (the client
    timed the request out and aborted) writes its markers first. The append then refuses
    the batch in Redis, atomically: it would open a transaction no marker ends, or slip
    into the producer's next one. Batches verified in the next transaction go in."""

    async def scenario() -> None:
        log = make_log()
        await log.ensure_recovered()
        await log.create_topic(TopicConfig("a", 2))
        parts = Partitions(log)
        c = TransactionCoordinator(log, parts, GroupCoordinator(log))
        init = await c.init_producer("t", 60_000)
        pid, epoch = init.producer_id, init.producer_epoch
        await c.add_partitions("t", pid, epoch, [("a", 0), ("a", 1)])
        await parts.append("a", 1, [txn_batch(pid, epoch, 0, b"in")])
        outcome, first = await c.verify_for_append("t", pid, epoch, [("a", 0), ("a", 1)])
        assert set(outcome.values()) == {Code.NONE}
        assert await c.end("t", pid, epoch, False) == Code.NONE  # overtakes the append
        end_before = await log.log_ends("a", [0, 1])
        for partition, seq in ((0, 0), (1, 1)):  # opening one, or joining the ended one
            with pytest.raises(TransactionNotOpen):
                await parts.append(
                    "a", partition, [txn_batch(pid, epoch, seq, b"late")], transaction=first
                )
        assert await log.log_ends("a", [0, 1]) == end_before  # nothing written
        assert await log.last_stable_offsets("a", [0, 1]) == end_before
        # The next transaction: its own serial number goes in; the late one still does not.
        await c.add_partitions("t", pid, epoch, [("a", 0)])
        _, second = await c.verify_for_append("t", pid, epoch, [("a", 0)])
        assert second > first
        appended = await parts.append(
            "a", 0, [txn_batch(pid, epoch, 0, b"next")], transaction=second
        )
        assert appended.base_offset == end_before[0]
        with pytest.raises(TransactionNotOpen):
            await parts.append("a", 0, [txn_batch(pid, epoch, 1, b"late")], transaction=first)
        assert await c.end("t", pid, epoch, True) == Code.NONE
        assert await log.last_stable_offsets("a", [0]) == await log.log_ends("a", [0])
        # The many-partition path checks the same.
        replies = await log.append_many([("a", 0, [txn_batch(pid, epoch, 1, b"x")])], second)
        assert isinstance(replies[0], TransactionNotOpen)

    asyncio.run(scenario())
