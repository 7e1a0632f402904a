"""The paged log's behaviour, on fakeredis and on a real redis-server."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import pytest

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import (
    InvalidConfig,
    InvalidProducerEpoch,
    InvalidTopic,
    OutOfOrderSequence,
    SequenceAhead,
    TopicExists,
    UnknownProducerId,
    UnknownTopic,
)
from kafkaesque.hot.log import Log
from kafkaesque.hot.log_types import RestoredPartition, RestoredTopic
from kafkaesque.records.batch import check_batch, decode_batch, read_header
from kafkaesque.records.build import build_batch


def batch(values: list[bytes]) -> bytes:
    return build_batch(values, timestamp=1_700_000_000_000)


def words(start: int, count: int) -> list[bytes]:
    return [b"w%d" % i for i in range(start, start + count)]


async def read_all(
    log: Log, topic: str, partition: int = 0, offset: int = 0
) -> list[tuple[int, bytes]]:
    """Every (offset, value) from offset to the end, fetching a few batches at a time."""
    out: list[tuple[int, bytes]] = []
    while True:
        result = await log.read(topic, partition, offset, max_records=7)
        assert not result.below_start and not result.past_end
        if not result.batches:
            return out
        for b in result.batches:
            check_batch(b)  # the patched batch is still a valid batch (CRC untouched)
            out += [(r.offset, r.value) for r in decode_batch(b) if r.offset >= offset]
        offset = out[-1][0] + 1


def test_offsets_across_pages_and_rollover(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 1, page_size=10))
        bases = []
        for i in range(0, 50, 5):
            bases += (
                await log.append("t", 0, [batch(words(i, 3)), batch(words(i + 3, 2))])
            ).base_offsets
        assert bases == [0, 3, 5, 8, 10, 13, 15, 18, 20, 23, 25, 28, 30, 33, 35, 38, 40, 43, 45, 48]
        state = await log.state("t", 0)
        assert (state.log_start, state.log_end, state.pages, state.records) == (0, 50, 5, 50)
        assert await read_all(log, "t") == list(enumerate(words(0, 50)))
        # Reads start at the batch holding the offset, in any page.
        for offset in (0, 4, 9, 10, 27, 49):
            result = await log.read("t", 0, offset, max_records=1)
            first = read_header(result.batches[0])
            assert first.base_offset <= offset <= first.base_offset + first.last_offset_delta

    asyncio.run(scenario())


def test_reads_find_any_offset_in_pages_of_many_batches(make_log: Callable[[], Log]) -> None:
    """A page's last batch index entries are scanned, earlier ones binary searched: every
    offset of closed pages and the open one is found, a read goes on across pages to the
    log's end, and a budget takes whole batches while they fit."""

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 1, page_size=60))
        end = 0
        for i in range(80):  # batches of 1-3 records: pages of ~30 batches, the last open
            count = 1 + i % 3
            await log.append("t", 0, [batch(words(end, count))])
            end += count
        assert (await log.state("t", 0)).pages == 3
        for offset in range(end):
            one = await log.read("t", 0, offset, max_records=1)
            first = read_header(one.batches[0])
            assert first.base_offset <= offset <= first.base_offset + first.last_offset_delta
            rest = [read_header(b) for b in (await log.read("t", 0, offset)).batches]
            assert rest[0] == first
            for before, after in itertools.pairwise(rest):
                assert after.base_offset == before.base_offset + before.last_offset_delta + 1
            assert rest[-1].base_offset + rest[-1].last_offset_delta == end - 1
            budget = 3 * len(one.batches[0])
            some = (await log.read("t", 0, offset, max_bytes=budget)).batches
            assert [read_header(b) for b in some] == rest[: len(some)]
            assert sum(map(len, some)) <= budget
            if len(some) < len(rest):  # the next batch would not have fitted
                following = (await log.read("t", 0, rest[len(some)].base_offset)).batches[0]
                assert sum(map(len, some)) + len(following) > budget
        assert not (await log.read("t", 0, end)).batches

    asyncio.run(scenario())


def test_batch_larger_than_page_fills_and_closes_it(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("big", 1, page_size=4))
        assert (await log.append("big", 0, [batch(words(0, 9))])).base_offsets == [0]
        assert (await log.append("big", 0, [batch(words(9, 1))])).base_offsets == [9]
        state = await log.state("big", 0)
        assert (state.pages, state.log_end) == (2, 10)
        result = await log.read("big", 0, 5)
        assert [read_header(b).base_offset for b in result.batches] == [0, 9]

    asyncio.run(scenario())


def test_empty_topic_and_reading_past_the_end(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("empty", 3))
        result = await log.read("empty", 2, 0)
        assert (result.batches, result.log_start, result.log_end) == ([], 0, 0)
        assert (await log.read("empty", 2, 1)).past_end
        await log.append("empty", 1, [batch(words(0, 2))])
        assert (await log.read("empty", 1, 2)).batches == []
        assert (await log.read("empty", 1, 3)).past_end
        with pytest.raises(UnknownTopic):
            await log.read("empty", 3, 0)
        with pytest.raises(UnknownTopic):
            await log.append("empty", 3, [batch(words(0, 1))])
        with pytest.raises(UnknownTopic):
            await log.read("nope", 0, 0)

    asyncio.run(scenario())


def test_max_bytes_returns_at_least_one_whole_batch(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("mb", 1))
        big = batch([b"x" * 5000])
        await log.append("mb", 0, [big, big, big])
        assert len((await log.read("mb", 0, 0, max_bytes=100)).batches) == 1
        assert len((await log.read("mb", 0, 0, max_bytes=2 * len(big))).batches) == 2

    asyncio.run(scenario())


def test_max_bytes_across_pages_of_one_batch_and_of_several(make_log: Callable[[], Log]) -> None:
    """A page holding one batch is left unread when it would not fit (its size is in the
    page's stats): the answer is the one a read of every batch gives."""

    async def scenario() -> None:
        log = make_log()
        sizes = [5000, 7000, 3000, 9000, 4000]
        batches = [batch([b"x" * n]) for n in sizes]
        for name, page_size in (("one", 1), ("two", 2)):  # batches of one record each
            await log.create_topic(TopicConfig(name, 1, page_size=page_size))
            for b in batches:
                await log.append(name, 0, [b])
            for offset in range(5):
                for budget in (1, 6000, 12_100, 15_200, 24_300, 40_000):
                    expected, total = [], 0
                    for b in batches[offset:]:  # whole batches while they fit, one at least
                        if expected and total + len(b) > budget:
                            break
                        expected.append(b)
                        total += len(b)
                    got = (await log.read(name, 0, offset, max_bytes=budget)).batches
                    assert [len(b) for b in got] == [len(b) for b in expected], (
                        name,
                        offset,
                        budget,
                    )

    asyncio.run(scenario())


def test_max_pages_drops_oldest_closed_pages_and_index_entries(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("mp", 1, page_size=5, max_pages=2))
        for i in range(0, 32, 4):
            await log.append("mp", 0, [batch(words(i, 4))])
        # Pages close at 8, 16, 24, 32 records (batches of 4 never split); 2 closed pages kept.
        state = await log.state("mp", 0)
        assert (state.log_start, state.log_end, state.pages) == (16, 32, 2)
        assert await log.redis.zcard("ks:{mp:0}:index") == 2
        assert await log.redis.exists("ks:{mp:0}:page:0", "ks:{mp:0}:bidx:1") == 0
        result = await log.read("mp", 0, 3)
        assert result.below_start and result.log_start == 16
        assert await read_all(log, "mp", offset=16) == list(enumerate(words(16, 16), 16))

    asyncio.run(scenario())


def test_ttl_applies_to_closed_pages_and_expired_pages_are_trimmed(
    make_log: Callable[[], Log],
) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("ttl", 1, page_size=2, ttl=3600))
        await log.append("ttl", 0, [batch(words(0, 2)), batch(words(2, 2)), batch(words(4, 1))])
        r = log.redis
        assert 0 < await r.ttl("ks:{ttl:0}:page:0") <= 3600
        assert 0 < await r.ttl("ks:{ttl:0}:bidx:1") <= 3600
        assert await r.ttl("ks:{ttl:0}:page:2") == -1  # the open page never expires
        # What expiry does: the page's keys vanish while its index entry stays.
        await r.delete("ks:{ttl:0}:page:0", "ks:{ttl:0}:bidx:0")
        result = await log.read("ttl", 0, 0)
        assert result.below_start and result.log_start == 2
        state = await log.state("ttl", 0)  # applies retention: the index is trimmed
        assert (state.log_start, state.pages) == (2, 2)
        assert await r.zrange("ks:{ttl:0}:index", 0, -1) == [b"1", b"2"]

    asyncio.run(scenario())


def test_concurrent_appenders_get_contiguous_unique_offsets(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("c", 1, page_size=50))

        async def appender(name: int) -> list[tuple[int, bytes]]:
            assigned = []
            for i in range(20):
                values = [b"%d-%d-%d" % (name, i, j) for j in range(1 + (name + i) % 4)]
                [base] = (await log.append("c", 0, [batch(values)])).base_offsets
                assigned += [(base + j, v) for j, v in enumerate(values)]
            return assigned

        results = await asyncio.gather(*(appender(n) for n in range(8)))
        assigned = sorted(pair for r in results for pair in r)
        assert [o for o, _ in assigned] == list(range(len(assigned)))  # no gap, no duplicate
        assert await read_all(log, "c") == assigned

    asyncio.run(scenario())


def test_global_sequence_follows_produce_order_across_topics(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("a", 1))
        await log.create_topic(TopicConfig("b", 2))
        await log.append("a", 0, [batch(words(0, 3))])
        await log.append("b", 1, [batch(words(0, 2))])
        await log.append("a", 0, [batch(words(3, 1))])
        raw_a = await log.redis.get("ks:{a:0}:bidx:0")
        raw_b = await log.redis.get("ks:{b:1}:bidx:0")

        def entries(raw: bytes) -> list[tuple[int, int]]:
            return [
                (int.from_bytes(raw[i : i + 8], "big"), int.from_bytes(raw[i + 8 : i + 16], "big"))
                for i in range(0, len(raw), 16)
            ]

        assert entries(raw_a) == [(0, 1), (3, 6)]  # (base offset, first global sequence)
        assert entries(raw_b) == [(0, 4)]

    asyncio.run(scenario())


def test_create_validates_and_fails_without_leaving_keys(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        for bad in ("", ".", "..", "a b", "x" * 250, "ümlaut", "a/b"):
            with pytest.raises(InvalidTopic):
                await log.create_topic(TopicConfig(bad, 1))
        for config in (
            TopicConfig("z", 0),
            TopicConfig("z", 1, page_size=0),
            TopicConfig("z", 1, ttl=-1),
        ):
            with pytest.raises(InvalidConfig):
                await log.create_topic(config)
        assert await log.redis.keys("*") == []
        created = await log.create_topic(
            TopicConfig("ok.name_-1", 2, page_size=7, ttl=5, max_pages=3)
        )
        assert await log.topic("ok.name_-1") == created
        before = sorted(await log.redis.keys("*"))
        with pytest.raises(TopicExists):
            await log.create_topic(TopicConfig("ok.name_-1", 4))
        assert sorted(await log.redis.keys("*")) == before
        assert await log.topic("ok.name_-1") == created
        assert await log.list_topics() == ["ok.name_-1"]

    asyncio.run(scenario())


def test_delete_removes_every_key(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("keep", 1))
        await log.append("keep", 0, [batch(words(0, 1))])
        kept = sorted(await log.redis.keys("*"))
        await log.create_topic(TopicConfig("gone", 2, page_size=3))
        for p in (0, 1):
            await log.append("gone", p, [batch(words(0, 4)), batch(words(4, 1))])
        await log.delete_topic("gone")
        assert sorted(await log.redis.keys("*")) == kept
        with pytest.raises(UnknownTopic):
            await log.delete_topic("gone")
        await log.create_topic(TopicConfig("gone", 1))  # the name is free again
        assert (await log.read("gone", 0, 0)).log_end == 0

    asyncio.run(scenario())


def producer_batch(values: list[bytes], pid: int, epoch: int, seq: int) -> bytes:
    return build_batch(
        values, timestamp=1, producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )


def test_idempotent_producer_retries_are_not_written_twice(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("idem", 1))
        pid = await log.new_producer_id()
        first = producer_batch(words(0, 3), pid, 0, 0)
        second = producer_batch(words(3, 2), pid, 0, 3)
        assert (await log.append("idem", 0, [first])).base_offsets == [0]
        assert (await log.append("idem", 0, [second])).base_offsets == [3]
        # A retry of either of the last batches is acknowledged with its original offset.
        assert (await log.append("idem", 0, [first])).base_offsets == [0]
        assert (await log.append("idem", 0, [second])).base_offsets == [3]
        assert (await log.state("idem", 0)).log_end == 5
        # A sequence ahead of the next (an earlier batch still to come) is refused as
        # "not yet", one behind the last five batches as out of order; neither writes.
        with pytest.raises(SequenceAhead):
            await log.append("idem", 0, [producer_batch(words(9, 1), pid, 0, 9)])
        with pytest.raises(OutOfOrderSequence):
            await log.append("idem", 0, [producer_batch(words(9, 1), pid, 0, 1)])
        assert (
            await log.append("idem", 0, [producer_batch(words(5, 1), pid, 1, 0)])
        ).base_offsets == [5]
        with pytest.raises(InvalidProducerEpoch):
            await log.append("idem", 0, [producer_batch(words(6, 1), pid, 0, 5)])
        # A new epoch must start at sequence 0.
        with pytest.raises(OutOfOrderSequence):
            await log.append("idem", 0, [producer_batch(words(6, 1), pid, 2, 4)])
        assert await read_all(log, "idem") == list(enumerate(words(0, 6)))
        # Plain producers are never sequence-checked.
        assert (await log.append("idem", 0, [batch(words(0, 1))] * 2)).base_offsets == [6, 7]

    asyncio.run(scenario())


def test_lost_producer_state_is_unknown_producer_id(
    make_log: Callable[[], Log], monkeypatch
) -> None:
    """A producer in mid-sequence the partition has no state for (Redis lost it) gets
    UNKNOWN_PRODUCER_ID, which clients recover from (KIP-360), and writes nothing; producer
    ids handed out after the loss are above those handed out before it."""

    import kafkaesque.hot.log

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("lost", 1))
        now = 1_800_000_000_000
        monkeypatch.setattr(kafkaesque.hot.log, "_now_ms", lambda: now)
        pid = await log.new_producer_id()
        assert await log.new_producer_id() == pid + 1  # within a millisecond: the counter
        assert (
            await log.append("lost", 0, [producer_batch(words(0, 2), pid, 0, 0)])
        ).log_start == 0
        await log.redis.flushall()
        config = TopicConfig("lost", 1)
        await log.restore([RestoredTopic(config, [RestoredPartition(0, 0)])], 0, 0)
        with pytest.raises(UnknownProducerId):
            await log.append("lost", 0, [producer_batch(words(2, 1), pid, 0, 2)])
        assert (await log.state("lost", 0)).log_end == 0
        # The archive knew no producer id (floor 0): a millisecond later, the next id is
        # still above every id handed out before the loss.
        monkeypatch.setattr(kafkaesque.hot.log, "_now_ms", lambda: now + 1)
        fresh = await log.new_producer_id()
        assert fresh > pid + 1
        assert (
            await log.append("lost", 0, [producer_batch(words(2, 1), fresh, 0, 0)])
        ).base_offsets == [0]

    asyncio.run(scenario())


def test_add_partitions_grows_and_never_shrinks(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("grow", 2, page_size=9))
        grown = await log.add_partitions("grow", 5)
        assert (await log.topic("grow")) == grown and grown.partitions == 5 and grown.page_size == 9
        assert (await log.append("grow", 4, [batch(words(0, 2))])).base_offsets == [0]
        with pytest.raises(InvalidConfig):
            await log.add_partitions("grow", 5)
        with pytest.raises(UnknownTopic):
            await log.add_partitions("nope", 3)

    asyncio.run(scenario())


def test_idle_producer_ids_expire_after_a_day(make_log: Callable[[], Log], monkeypatch) -> None:
    import kafkaesque.hot.log_appends

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("exp", 1))
        producers = log.keys.partition("exp", 0).producers
        day = 86_400_000
        for pid, now in ((1, 0), (2, day // 2), (3, day + 1)):
            monkeypatch.setattr(kafkaesque.hot.log_appends, "_now_ms", lambda now=now: now)
            await log.append("exp", 0, [producer_batch(words(0, 1), pid, 0, 0)])
        # Producer 1 was last seen more than a day before producer 3's append.
        assert sorted(await log.redis.hkeys(producers)) == [b"2", b"3"]
        await log.delete_topic("exp")
        assert await log.redis.keys("*exp*") == []

    asyncio.run(scenario())


def test_offset_for_timestamp_finds_first_record_at_or_after(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("time", 1, page_size=4))
        for i in range(5):
            stamps = [1000 * i + 10 * j for j in range(3)]
            await log.append("time", 0, [build_batch(words(3 * i, 3), timestamps=stamps)])
        assert await log.offset_for_timestamp("time", 0, 0) == (0, 0)
        assert await log.offset_for_timestamp("time", 0, 2015) == (8, 2020)
        assert await log.offset_for_timestamp("time", 0, 2021) == (9, 3000)
        assert await log.offset_for_timestamp("time", 0, 4020) == (14, 4020)
        assert await log.offset_for_timestamp("time", 0, 4021) is None

    asyncio.run(scenario())


def test_offset_for_timestamp_with_timestamps_out_of_order(make_log: Callable[[], Log]) -> None:
    """As Kafka: the first batch whose max timestamp reaches the target, then its first
    record that does, even when a later batch (ending its page) is older."""

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("skew", 1, page_size=4))
        for stamps in ([5000, 5001], [1000, 1001], [2000, 2001], [500, 501], [7000, 100]):
            await log.append("skew", 0, [build_batch([b"a", b"b"], timestamps=stamps)])
        assert (await log.state("skew", 0)).pages == 3  # two closed pages, one open
        assert await log.offset_for_timestamp("skew", 0, 1500) == (0, 5000)
        assert await log.offset_for_timestamp("skew", 0, 5001) == (1, 5001)
        assert await log.offset_for_timestamp("skew", 0, 5002) == (8, 7000)
        assert await log.offset_for_timestamp("skew", 0, 7001) is None
        await log.close_idle_pages("skew", 0, older_than_ms=2**62)  # the open page closes
        assert await log.offset_for_timestamp("skew", 0, 5002) == (8, 7000)

    asyncio.run(scenario())


def test_read_without_min_one_reports_offsets_only(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("m1", 1))
        await log.append("m1", 0, [batch([b"x" * 100])])
        result = await log.read("m1", 0, 0, max_bytes=0, min_one=False)
        assert (result.batches, result.log_end) == ([], 1)
        assert len((await log.read("m1", 0, 0, max_bytes=10, min_one=True)).batches) == 1
        assert (await log.read("m1", 0, 0, max_bytes=10, min_one=False)).batches == []

    asyncio.run(scenario())


def test_archiving_keeps_pages_until_archived_then_applies_retention(
    make_log: Callable[[], Log],
) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.enable_archiving()
        await log.create_topic(TopicConfig("ar", 1, page_size=2, ttl=3600, max_pages=2))
        for i in range(0, 8, 2):
            await log.append("ar", 0, [batch(words(i, 2))])
        r = log.redis
        # Four closed pages, none archived: max pages and TTL leave them all alone.
        state = await log.state("ar", 0)
        assert (state.log_start, state.pages) == (0, 4)
        assert await r.ttl("ks:{ar:0}:page:0") == -1
        pages = await log.closed_pages("ar", 0, 0, max_pages=3)
        assert [(p.page, p.first_offset, p.next_offset) for p in pages] == [
            (0, 0, 2),
            (1, 2, 4),
            (2, 4, 6),
        ]
        assert pages[1].sequences == [3]
        assert [r.value for r in decode_batch(pages[1].batches[0])] == words(2, 2)
        assert [p.page for p in await log.closed_pages("ar", 0, 5)] == [2, 3]
        assert await log.first_unarchived_sequence("ar", 0) == 1
        # Archiving three pages lets retention drop the two oldest; page 2 gets its TTL.
        await log.mark_archived("ar", 0, 6)
        state = await log.state("ar", 0)
        assert (state.log_start, state.pages) == (4, 2)
        assert 0 < await r.ttl("ks:{ar:0}:page:2") <= 3600
        assert await r.ttl("ks:{ar:0}:page:3") == -1  # not archived yet
        assert await log.first_unarchived_sequence("ar", 0) == 7
        await log.mark_archived("ar", 0, 2)  # never goes back
        assert await log.first_unarchived_sequence("ar", 0) == 7
        await log.mark_archived("ar", 0, 8)
        assert await log.first_unarchived_sequence("ar", 0) is None
        assert await log.sequence_counter() == 8

    asyncio.run(scenario())


def test_close_idle_pages_closes_only_old_open_pages(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("idle", 1, page_size=100))
        assert not await log.close_idle_pages("idle", 0, 0)  # nothing to close
        await log.append("idle", 0, [batch(words(0, 3))])
        assert not await log.close_idle_pages("idle", 0, 60_000)  # too young
        assert await log.close_idle_pages("idle", 0, 0)
        assert [p.next_offset for p in await log.closed_pages("idle", 0, 0)] == [3]
        await log.append("idle", 0, [batch(words(3, 1))])
        assert await read_all(log, "idle") == list(enumerate(words(0, 4)))

    asyncio.run(scenario())


def test_lost_redis_waits_for_recovery_and_restores_offsets(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("lost", 2, page_size=2))
        await log.append("lost", 0, [batch(words(0, 5))])
        config = await log.topic("lost")
        await log.redis.flushall()  # Redis lost everything; the archive held offsets 0..4
        assert await log.needs_recovery()
        calls = []

        async def recover(restoring: Log) -> None:
            calls.append(1)
            await restoring.restore(
                [RestoredTopic(config, [RestoredPartition(5, 0), RestoredPartition(0, 3)])],
                sequence_floor=5,
                producer_id_floor=1000,
            )

        log.recover = recover
        appended = await log.append("lost", 0, [batch(words(5, 1))])
        assert appended.base_offsets == [5] and calls == [1]
        assert await log.topic("lost") == config
        state = await log.state("lost", 0)
        assert (state.log_start, state.log_end, state.leader_epoch) == (5, 6, 1)
        assert (await log.state("lost", 1)).leader_epoch == 4
        assert await log.sequence_counter() == 6  # ids go on after the archived ones
        assert await log.new_producer_id() > 1000
        # A partition that kept less than the archive holds restarts at the archived end.
        await log.restore([RestoredTopic(config, [RestoredPartition(9, 1)])], 0, 0)
        state = await log.state("lost", 0)
        assert (state.log_start, state.log_end, state.leader_epoch, state.pages) == (9, 9, 2, 0)
        assert (await log.append("lost", 0, [batch(words(0, 1))])).base_offsets == [9]
        assert calls == [1]

    asyncio.run(scenario())


def test_requests_meeting_a_loss_of_redis_at_once_share_one_recovery(
    make_log: Callable[[], Log],
) -> None:
    """Every request that finds Redis' data lost waits for one recovery rather than run
    its own beside the others: one at a time, each recovery read the whole archive, and a
    group's members, whose sessions the first one had started, expired while the others
    ran (a consumer then joined again and read, silently, offsets it had read before)."""

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("once", 1, page_size=2))
        config = await log.topic("once")
        await log.redis.flushall()
        calls = []

        async def recover(restoring: Log) -> None:
            calls.append(1)
            await asyncio.sleep(0.05)  # the archive's reads
            await restoring.restore([RestoredTopic(config, [RestoredPartition(5, 0)])], 5, 1000)

        log.recover = recover
        await asyncio.gather(*(log.ensure_recovered() for _ in range(5)))
        assert calls == [1]
        assert not await log.needs_recovery()
        assert (await log.state("once", 0)).log_end == 5

    asyncio.run(scenario())


def test_switching_archiving_on_takes_back_the_ttl_of_unarchived_pages(
    make_log: Callable[[], Log],
) -> None:
    async def scenario() -> None:
        log = make_log()
        r = log.redis
        await log.create_topic(TopicConfig("sw", 2, page_size=2, ttl=3600, max_pages=4))
        for i in range(0, 6, 2):
            await log.append("sw", 1, [batch(words(i, 2))])
        # Closed before any archive: every closed page has its TTL, the open one none.
        for n in range(3):
            assert 0 < await r.ttl(f"ks:{{sw:1}}:page:{n}") <= 3600
        await r.set("ks:archiving", 1)  # as older versions switched on: TTLs left in place
        await log.enable_archiving()
        for n in range(3):
            assert await r.ttl(f"ks:{{sw:1}}:page:{n}") == -1
            assert await r.ttl(f"ks:{{sw:1}}:bidx:{n}") == -1
        # Pages closing from now on get no TTL, and max pages drops none until archived.
        for i in range(6, 12, 2):
            await log.append("sw", 1, [batch(words(i, 2))])
        assert await r.ttl("ks:{sw:1}:page:4") == -1
        state = await log.state("sw", 1)
        assert (state.log_start, state.pages) == (0, 6)
        assert [p.page for p in await log.closed_pages("sw", 1, 0)] == list(range(6))
        # Once archived they get the TTL again and retention applies.
        await log.mark_archived("sw", 1, 8)
        assert 0 < await r.ttl("ks:{sw:1}:page:3") <= 3600
        assert (await log.state("sw", 1)).log_start == 4
        # Already done: a second call changes nothing (archived pages keep their TTL).
        await log.enable_archiving()
        assert 0 < await r.ttl("ks:{sw:1}:page:3") <= 3600

    asyncio.run(scenario())


def test_archiving_is_a_field_of_every_partition(make_log: Callable[[], Log]) -> None:
    """The scripts read archiving from the partition's meta: archive_on sets it, a topic
    created or grown later gets it from the switch, and data of the version before the
    field (switch "2") gets it at the next enable_archiving."""

    async def scenario() -> None:
        log = make_log()
        r = log.redis
        await log.create_topic(TopicConfig("old", 1, page_size=2, ttl=3600))

        async def fields(topic: str, partitions: int) -> list[bytes | None]:
            metas = [f"ks:{{{topic}:{p}}}:meta" for p in range(partitions)]
            return [await r.hget(meta, "archiving") for meta in metas]

        assert await fields("old", 1) == [None]
        await log.enable_archiving()
        assert (await r.get("ks:archiving"), await fields("old", 1)) == (b"3", [b"1"])
        await log.create_topic(TopicConfig("new", 2, page_size=2, ttl=3600))
        await log.add_partitions("new", 3)
        assert await fields("new", 3) == [b"1"] * 3
        # The previous version's data: switch "2", no field; its pages keep no TTL only
        # once enable_archiving (every archiver's start) has run again.
        await r.set("ks:archiving", b"2")
        await r.hdel("ks:{old:0}:meta", "archiving")
        for i in range(0, 4, 2):
            await log.append("old", 0, [batch(words(i, 2))])
        assert 0 < await r.ttl("ks:{old:0}:page:0") <= 3600
        await log.enable_archiving()
        assert (await r.get("ks:archiving"), await fields("old", 1)) == (b"3", [b"1"])
        assert await r.ttl("ks:{old:0}:page:0") == -1
        await log.append("old", 0, [batch(words(4, 2))])
        assert await r.ttl("ks:{old:0}:page:2") == -1

    asyncio.run(scenario())


def test_a_restore_switches_archiving_on_before_appends(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        config = TopicConfig("rs", 1, page_size=2, ttl=3600)
        await log.restore([RestoredTopic(config, [RestoredPartition(10, 0)])], 0, 0)
        await log.append("rs", 0, [batch(words(0, 2))])  # closes a page
        assert await log.redis.ttl("ks:{rs:0}:page:0") == -1  # kept until archived

    asyncio.run(scenario())
