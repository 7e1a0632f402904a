"""Transactions on the log: transactional batches open a transaction, markers (control
batches) end it, the last stable offset, READ_COMMITTED reads and the aborted index, epoch
fencing by markers, idempotent retries of transactional batches. On fakeredis and on a real
redis-server (``make_log``)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable

import pytest

from kafkaesque.cli.line_consumer import Consumer
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import InvalidProducerEpoch, InvalidRecord, UnknownTopic
from kafkaesque.hot.compaction import Compactor
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import LATEST, MAX_TIMESTAMP, Partitions
from kafkaesque.records.batch import (
    check_batch,
    control_type,
    decode_batch,
    decode_values,
    is_aborted,
    is_control,
    read_header,
    split_batches,
)
from kafkaesque.records.build import ABORT, COMMIT, build_batch, build_control_batch
from kafkaesque.txn.transaction import TxnMarker

PID, OTHER = 1000, 2000
TXN = {"producer_id": PID, "producer_epoch": 0, "base_sequence": 0, "transactional": True}


def txn(values: list[bytes], pid: int = PID, epoch: int = 0, seq: int = 0) -> bytes:
    return build_batch(
        values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True
    )


def plain(values: list[bytes]) -> bytes:
    return build_batch(values)


async def committed_values(log: Log, topic: str, offset: int = 0) -> list[bytes | None]:
    """What a READ_COMMITTED reader keeps: batches below the LSO, no markers, no aborted."""
    result = await log.read(topic, 0, offset, committed=True)
    return [
        v
        for b in result.batches
        if not is_control(b) and not is_aborted(b, result.aborted)
        for v in decode_values(b)
    ]


def test_control_batch_layout() -> None:
    marker = build_control_batch(7, 3, commit=False, coordinator_epoch=5, timestamp=1234)
    header = check_batch(marker)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, -1)
    assert header.record_count == 1 and header.max_timestamp == 1234
    [record] = decode_batch(marker)
    assert record.key == b"\x00\x00\x00\x00"  # version 0, ABORT
    assert record.value == b"\x00\x00\x00\x00\x00\x05"  # version 0, coordinator epoch 5
    assert control_type(marker) == ABORT
    assert control_type(build_control_batch(7, 3, commit=True)) == COMMIT
    assert decode_values(marker) == []  # no user records


def test_clients_may_not_write_control_batches(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 1))
        marker = build_control_batch(PID, 0, commit=True)
        with pytest.raises(InvalidRecord, match="control"):
            split_batches(marker)  # the wire's check
        with pytest.raises(InvalidRecord, match="broker only"):
            await log.append("t", 0, [marker])  # and the script's, for any other caller
        no_pid = build_batch([b"x"], transactional=True)
        with pytest.raises(InvalidRecord, match="producer id"):
            await log.append("t", 0, [no_pid])
        assert (await log.state("t", 0)).log_end == 0

    asyncio.run(scenario())


def test_commit_and_abort_move_the_last_stable_offset(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 1, page_size=3))
        parts = Partitions(log)
        await log.append("t", 0, [plain([b"p0"])])  # 0
        await log.append("t", 0, [txn([b"a0", b"a1"])])  # 1-2: opens PID's transaction
        assert await parts.open_transactions("t", 0) == [(PID, 1)]
        await log.append("t", 0, [txn([b"b0"], pid=OTHER)])  # 3: opens OTHER's
        await log.append("t", 0, [txn([b"a2"], seq=2)])  # 4: PID's goes on
        await log.append("t", 0, [plain([b"p1"])])  # 5
        assert await parts.open_transactions("t", 0) == [(PID, 1), (OTHER, 3)]
        assert await log.last_stable_offset("t", 0) == 1
        first = await log.read("t", 0, 0, committed=True)
        assert first.last_stable == 1 and first.log_end == 6
        assert await committed_values(log, "t") == [b"p0"]
        # READ_UNCOMMITTED reads everything, and reports the same stable offset.
        everything = await log.read("t", 0, 0)
        assert everything.last_stable == 1 and len(everything.batches) == 5
        found = await parts.list_offset("t", 0, LATEST, committed=True)
        assert found is not None and found.offset == 1
        assert (await parts.list_offset("t", 0, LATEST)).offset == 6  # type: ignore[union-attr]

        # PID aborts (marker at 6): OTHER's transaction at 3 now holds the LSO.
        outcome = await parts.write_markers([("t", 0)], TxnMarker(PID, 0, commit=False))
        assert outcome == {("t", 0): None}
        assert await log.last_stable_offset("t", 0) == 3
        assert await log.aborted_transactions("t", 0) == [(PID, 1, 6)]
        read = await log.read("t", 0, 0, committed=True)
        assert read.aborted == [(PID, 1, 6)]
        assert await committed_values(log, "t") == [b"p0"]  # a0, a1 dropped; b0 pending

        # OTHER commits (marker at 7): everything is stable.
        assert await parts.write_markers([("t", 0)], TxnMarker(OTHER, 0, commit=True)) == {
            ("t", 0): None
        }
        assert await log.last_stable_offset("t", 0) == 8 == (await log.state("t", 0)).log_end
        assert await parts.open_transactions("t", 0) == []
        assert await committed_values(log, "t") == [b"p0", b"b0", b"p1"]
        markers = [b for b in (await log.read("t", 0, 0)).batches if is_control(b)]
        assert [control_type(b) for b in markers] == [ABORT, COMMIT]
        assert [read_header(b).base_offset for b in markers] == [6, 7]
        # A read from inside the aborted range still learns of the abort; one after it not.
        assert (await log.read("t", 0, 4, committed=True)).aborted == [(PID, 1, 6)]
        assert (await log.read("t", 0, 7, committed=True)).aborted == []

    asyncio.run(scenario())


def test_committed_lookups_by_time_stop_at_the_last_stable_offset(
    make_log: Callable[[], Log],
) -> None:
    """ListOffsets by time (and MAX_TIMESTAMP) under READ_COMMITTED finds no offset at or
    past the last stable offset, as Kafka answers: a reader placed there would wait on a
    transaction that may abort."""

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 1))
        parts = Partitions(log)
        await log.append("t", 0, [build_batch([b"p0"], timestamp=1000)])  # 0
        await log.append(
            "t", 0, [build_batch([b"a0"], timestamp=2000, **TXN)]
        )  # 1: PID's transaction, open
        await log.append("t", 0, [build_batch([b"p1"], timestamp=3000)])  # 2
        for committed, expected in ((False, [0, 1, 2, 2]), (True, [0, None, None, None])):
            found = [
                await parts.list_offset("t", 0, ts, committed=committed)
                for ts in (500, 1500, 2500, MAX_TIMESTAMP)
            ]
            assert [f and f.offset for f in found] == expected, committed
        await parts.write_markers([("t", 0)], TxnMarker(PID, 0, commit=True))  # 3
        found = await parts.list_offset("t", 0, 2500, committed=True)
        assert found is not None and found.offset == 2

    asyncio.run(scenario())


def test_the_last_stable_offset_is_never_below_the_log_start(
    make_log: Callable[[], Log],
) -> None:
    """DeleteRecords past an open transaction's first offset: the last stable offset is
    the new log start, as in Kafka, not an offset no reader can fetch."""

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 1))
        await log.append("t", 0, [txn([b"a0"])])  # 0: PID's transaction, open
        await log.append("t", 0, [plain([b"p0"]), plain([b"p1"])])  # 1, 2
        assert await log.last_stable_offset("t", 0) == 0
        await log.delete_records("t", 0, 2)
        assert await log.last_stable_offset("t", 0) == 2
        read = await log.read("t", 0, 2, committed=True)
        assert (read.log_start, read.last_stable) == (2, 2)

    asyncio.run(scenario())


def test_committed_reads_stop_before_a_straddling_batch(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 1))
        await log.append("t", 0, [plain([b"a", b"b"]), txn([b"t0", b"t1"])])  # 0-1, 2-3
        await log.append("t", 0, [plain([b"c"])])  # 4
        result = await log.read("t", 0, 0, committed=True)
        assert [read_header(b).base_offset for b in result.batches] == [0]
        # At the LSO there is nothing to read yet, and no error.
        at_lso = await log.read("t", 0, 2, committed=True)
        assert at_lso.batches == [] and not at_lso.past_end and at_lso.last_stable == 2
        # min_one does not override the LSO: the first batch is past it.
        assert (await log.read("t", 0, 2, max_bytes=1, committed=True)).batches == []
        await Partitions(log).write_markers([("t", 0)], TxnMarker(PID, 0, commit=True))
        assert await committed_values(log, "t", 2) == [b"t0", b"t1", b"c"]

    asyncio.run(scenario())


def test_markers_fence_older_epochs(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 2))
        parts = Partitions(log)
        await log.append("t", 0, [txn([b"x"], epoch=3)])
        # A marker of an older epoch is refused and writes nothing.
        outcome = await parts.write_markers([("t", 0)], TxnMarker(PID, 2, commit=True))
        assert isinstance(outcome["t", 0], InvalidProducerEpoch)
        assert (await log.state("t", 0)).log_end == 1
        assert await log.open_transactions("t", 0) == [(PID, 0)]
        # The coordinator bumped the epoch (a timeout): its abort marker fences epoch 3.
        outcome = await parts.write_markers([("t", 0), ("t", 1)], TxnMarker(PID, 4, commit=False))
        assert outcome == {("t", 0): None, ("t", 1): None}  # partition 1: no txn, marker anyway
        assert (await log.state("t", 1)).log_end == 1
        assert await log.aborted_transactions("t", 1) == []  # nothing to abort there
        with pytest.raises(InvalidProducerEpoch):
            await log.append("t", 0, [txn([b"zombie"], epoch=3, seq=1)])
        # The new epoch starts at sequence 0.
        await log.append("t", 0, [txn([b"y"], epoch=4)])
        assert await log.open_transactions("t", 0) == [(PID, 2)]
        # Unknown partitions and topics are errors per partition.
        outcome = await parts.write_markers([("t", 5), ("nope", 0)], TxnMarker(PID, 4, commit=True))
        assert all(isinstance(e, UnknownTopic) for e in outcome.values())
        with pytest.raises(UnknownTopic):
            await log.open_transactions("t", 9)

    asyncio.run(scenario())


def test_transactional_retries_are_deduplicated(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 1))
        first = await log.append("t", 0, [txn([b"a", b"b"])])
        again = await log.append("t", 0, [txn([b"a", b"b"])])  # a retry: same offsets
        assert again.base_offsets == first.base_offsets == [0]
        await log.append("t", 0, [txn([b"c"], seq=2)])
        assert (await log.state("t", 0)).log_end == 3
        assert await log.open_transactions("t", 0) == [(PID, 0)]
        await Partitions(log).write_markers([("t", 0)], TxnMarker(PID, 0, commit=True))
        # The next transaction of the same producer opens at its first batch.
        await log.append("t", 0, [txn([b"d"], seq=3)])
        assert await log.open_transactions("t", 0) == [(PID, 4)]
        # The producer's sequence goes on across the marker: a gap is still refused.
        assert (await log.producers("t", 0))[0].last_sequence == 3

    asyncio.run(scenario())


def test_aborted_index_is_trimmed_with_the_log(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 1, page_size=2, max_pages=1))
        parts = Partitions(log)
        await log.append("t", 0, [txn([b"a"])])  # 0
        await parts.write_markers([("t", 0)], TxnMarker(PID, 0, commit=False))  # 1
        assert await log.aborted_transactions("t", 0) == [(PID, 0, 1)]
        for i in range(3):
            await log.append("t", 0, [txn([b"b"], seq=1 + i)])
            await parts.write_markers([("t", 0)], TxnMarker(PID, 0, commit=False))
        assert (await log.state("t", 0)).log_start > 1
        kept = await log.aborted_transactions("t", 0)
        assert (PID, 0, 1) not in kept and kept[-1] == (PID, 6, 7)

    asyncio.run(scenario())


def test_delete_topic_removes_the_transaction_keys(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 1))
        await log.append("t", 0, [txn([b"a"])])
        await log.end_transaction("t", 0, PID, 0, commit=False)
        await log.append("t", 0, [txn([b"b"], seq=1)])
        await log.delete_topic("t")
        await log.create_topic(TopicConfig("t", 1))
        assert await log.open_transactions("t", 0) == []
        assert await log.aborted_transactions("t", 0) == []
        assert await log.last_stable_offset("t", 0) == 0

    asyncio.run(scenario())


def test_compaction_drops_aborted_and_keeps_open_transactions(
    make_log: Callable[[], Log],
) -> None:
    async def scenario() -> None:
        log = make_log()
        configs = {"cleanup.policy": "compact", "kafkaesque.page.size": "4"}
        await log.create_topic(TopicConfig("c", 1, configs=configs))
        parts = Partitions(log)

        def keyed(key: bytes, value: bytes, pid: int = -1, seq: int = -1) -> bytes:
            if pid < 0:
                return build_batch([value], [key])
            return build_batch(
                [value], [key], producer_id=pid, producer_epoch=0, base_sequence=seq,
                transactional=True,
            )  # fmt: skip

        await log.append("c", 0, [keyed(b"a", b"a1")])  # 0
        await log.append("c", 0, [keyed(b"a", b"a2", PID, 0)])  # 1: aborted below
        await log.append("c", 0, [keyed(b"b", b"b1", OTHER, 0)])  # 2: committed below
        await log.append("c", 0, [keyed(b"b", b"b2")])  # 3 (page 0 closes)
        await parts.write_markers([("c", 0)], TxnMarker(PID, 0, commit=False))  # 4
        await parts.write_markers([("c", 0)], TxnMarker(OTHER, 0, commit=True))  # 5
        await log.append("c", 0, [keyed(b"a", b"a3", 3000, 0)])  # 6: stays open
        await log.append("c", 0, [keyed(b"c", b"c1")])  # 7 (page 1 closes)
        await log.append("c", 0, [keyed(b"d", b"d1")])  # 8, the open page

        [done] = await Compactor(log).run_once()
        assert done.compacted
        batches = (await log.read("c", 0, 0)).batches
        markers = [read_header(b).base_offset for b in batches if is_control(b)]
        assert markers == [4, 5]  # markers stay
        rows = [(r.offset, r.value) for b in batches if not is_control(b) for r in decode_batch(b)]
        # a2 (aborted) and b1 (committed, then superseded) went; a1 stays: a3 may yet abort.
        assert rows == [(0, b"a1"), (3, b"b2"), (6, b"a3"), (7, b"c1"), (8, b"d1")]
        assert await log.open_transactions("c", 0) == [(3000, 6)]
        assert await committed_values(log, "c") == [b"a1", b"b2"]

    asyncio.run(scenario())


def test_following_consumer_waits_for_the_commit(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 2))
        await log.append("t", 0, [txn([b"t0"])])
        await log.append("t", 0, [plain([b"p0"])])
        await log.append("t", 1, [plain([b"other"])])
        reads: list[int] = []
        read = log.read

        async def counting_read(topic: str, partition: int, *args, **kwargs):
            reads.append(partition)
            return await read(topic, partition, *args, **kwargs)

        log.read = counting_read  # type: ignore[method-assign]
        out = io.BytesIO()
        following = asyncio.create_task(Consumer(log, "t", {0: 0, 1: 0}).run(out, follow=True))
        await asyncio.sleep(0.5)
        assert out.getvalue() == b"other\n"  # t0 and p0 wait behind the open transaction
        idle_reads = len(reads)
        await asyncio.sleep(1.2)  # a safety-net wakeup: partition 0's LSO did not move
        assert len(reads) == idle_reads
        await Partitions(log).write_markers([("t", 0)], TxnMarker(PID, 0, commit=True))
        for _ in range(100):
            if out.getvalue().endswith(b"p0\n"):
                break
            await asyncio.sleep(0.05)
        following.cancel()
        assert out.getvalue() == b"other\nt0\np0\n"

    asyncio.run(scenario())
