"""Log compaction (kafkaesque/hot/compaction.py, hot/lua/compact.lua), on fakeredis and on
a real redis-server: what survives, when, and that readers, retention and the archiver's
view of the pages stay consistent."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence

import pytest
import redis.asyncio
from click.testing import CliRunner, Result

from kafkaesque.cli import main
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import Conflict, InvalidConfig
from kafkaesque.hot.compaction import Compactor
from kafkaesque.hot.compaction_types import Policy
from kafkaesque.hot.log import Log
from kafkaesque.records.batch import decode_batch, read_header
from kafkaesque.records.build import build_batch
from tests.log_reads import read_rows

TS = 1_700_000_000_000  # record timestamps: long ago unless a test says otherwise
HOUR = 3_600_000
Pair = tuple[bytes | None, bytes | None]


def keyed(pairs: Sequence[Pair], ts: int = TS) -> bytes:
    """One batch of (key, value) records; a None value is a tombstone."""
    return build_batch([v for _, v in pairs], [k for k, _ in pairs], timestamps=[ts] * len(pairs))


def compact_topic(name: str, page_size: int = 4, **configs: str) -> TopicConfig:
    settings = {"cleanup.policy": "compact", "kafkaesque.page.size": str(page_size)}
    settings.update({k.replace("_", "."): v for k, v in configs.items()})
    return TopicConfig(name, 1, configs=settings)


async def page_sizes(log: Log, topic: str) -> tuple[int, int, int]:
    """(closed_bytes as meta has it, the stats' sum, the closed pages' batches' sum)."""
    p = log.keys.partition(topic, 0)
    meta = await log.redis.hgetall(p.meta)
    stats = await log.redis.hgetall(p.stats)
    stored = 0
    for page in stats:
        stored += sum(map(len, await log.redis.lrange(p.page(int(page)), 0, -1)))
    return int(meta[b"closed_bytes"]), sum(int(v.split()[1]) for v in stats.values()), stored


class Clock:
    def __init__(self, now: int = TS + 1000 * HOUR) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def run(scenario: Callable[[], object]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]


def test_latest_record_per_key_keeps_its_offset(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(compact_topic("c"))
        # Pages of 4 records: [a1 b1 a2 c1] [b2 a3 | k1 x1] [a4] (open).
        await log.append("c", 0, [keyed([(b"a", b"a1"), (b"b", b"b1")])])
        await log.append("c", 0, [keyed([(b"a", b"a2"), (b"c", b"c1")])])
        await log.append("c", 0, [keyed([(b"b", b"b2"), (b"a", b"a3")])])
        await log.append("c", 0, [keyed([(None, b"k1"), (b"x", b"x1")])])
        await log.append("c", 0, [keyed([(b"a", b"a4")])])
        before = await log.state("c", 0)

        [done] = await Compactor(log).run_once()
        assert done.compacted and done.total("records_before") == 8
        assert done.total("records_after") == 4

        # Closed pages keep the latest of each key (the keyless record goes, as in Kafka);
        # the open page's a4 does not count: it is not compacted, nor does it compact.
        assert await read_rows(log, "c") == [
            (3, b"c", b"c1"),
            (4, b"b", b"b2"),
            (5, b"a", b"a3"),
            (7, b"x", b"x1"),
            (8, b"a", b"a4"),
        ]
        after = await log.state("c", 0)
        assert (after.log_start, after.log_end) == (before.log_start, before.log_end) == (0, 9)
        assert after.bytes < before.bytes and after.records == 5
        closed_bytes, stats_bytes, stored = await page_sizes(log, "c")
        assert closed_bytes == stats_bytes == stored

        # A second pass finds nothing new.
        [again] = await Compactor(log).run_once()
        assert not again.compacted and "nothing new" in again.format()

    run(scenario)


def test_rewritten_batches_keep_producer_and_offsets(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(compact_topic("p", page_size=3))
        pid = await log.new_producer_id()
        first = build_batch(
            [b"1", b"2", b"3"], [b"k", b"j", b"k"], timestamp=TS, producer_id=pid,
            producer_epoch=0, base_sequence=0,
        )  # fmt: skip
        await log.append("p", 0, [first])
        await log.append("p", 0, [keyed([(b"j", b"4"), (b"x", b"1"), (b"y", b"1")])])
        await log.append("p", 0, [keyed([(b"z", b"open")])])
        await Compactor(log).run_once()
        result = await log.read("p", 0, 0)
        header = read_header(result.batches[0])
        assert (header.base_offset, header.last_offset_delta, header.record_count) == (0, 2, 1)
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (pid, 0, 0)
        assert [(r.offset, r.value) for r in decode_batch(result.batches[0])] == [(2, b"3")]
        # The producer's next batch is still in sequence: its state is not in the pages.
        nxt = build_batch(
            [b"5"], [b"k"], timestamp=TS, producer_id=pid, producer_epoch=0, base_sequence=3
        )
        assert (await log.append("p", 0, [nxt])).base_offsets == [7]

    run(scenario)


def test_tombstones_stay_for_delete_retention_then_go(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(compact_topic("t", delete_retention_ms=str(HOUR)))
        clock = Clock()
        await log.append(
            "t", 0, [keyed([(b"a", b"a1"), (b"b", b"b1"), (b"a", None), (b"c", b"c1")])]
        )
        await log.append(
            "t", 0, [keyed([(b"d", b"d1"), (b"e", b"e1"), (b"f", b"f1"), (b"g", b"g1")])]
        )
        await log.append("t", 0, [keyed([(b"z", b"open")])])
        await Compactor(log, clock=clock).run_once()
        # The tombstone hides a1 and stays, so consumers learn that a is gone.
        assert (2, b"a", None) in await read_rows(log, "t")
        assert all(key != b"a" or value is None for _, key, value in await read_rows(log, "t"))

        clock.now += HOUR - 1
        [early] = await Compactor(log, clock=clock).run_once()
        assert not early.compacted and (2, b"a", None) in await read_rows(log, "t")

        clock.now += 1  # delete.retention.ms after its page was first compacted
        compactor = Compactor(log, clock=clock)
        read_page, pages_read = compactor._snapshot, []

        async def counting(topic: str, partition: int, page: int):  # type: ignore[no-untyped-def]
            pages_read.append(page)
            return await read_page(topic, partition, page)

        compactor._snapshot = counting  # type: ignore[method-assign]
        [due] = await compactor.run_once()
        assert pages_read == [0]  # only the tombstone's page: nothing else can change
        assert due.compacted and due.total("records_before") - due.total("records_after") == 1
        assert [key for _, key, _ in await read_rows(log, "t")] == [
            b"b", b"c", b"d", b"e", b"f", b"g", b"z"
        ]  # fmt: skip
        assert (await log.state("t", 0)).log_start == 0

    run(scenario)


def test_min_compaction_lag_keeps_recent_pages(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(compact_topic("lag", min_compaction_lag_ms=str(HOUR)))
        clock = Clock()
        old, recent = clock.now - 2 * HOUR, clock.now - HOUR // 2
        await log.append(
            "lag", 0, [keyed([(b"a", b"1"), (b"a", b"2"), (b"b", b"1"), (b"b", b"2")], old)]
        )
        await log.append(
            "lag", 0, [keyed([(b"a", b"3"), (b"a", b"4"), (b"c", b"1"), (b"c", b"2")], recent)]
        )
        await log.append("lag", 0, [keyed([(b"z", b"open")], recent)])

        compactor = Compactor(log, clock=clock)
        [done] = await compactor.run_once()
        # The old page is compacted on its own; the recent one is not even mapped, so a3
        # and a4 do not remove a2 yet.
        assert [(k, v) for _, k, v in await read_rows(log, "lag")] == [
            (b"a", b"2"), (b"b", b"2"), (b"a", b"3"), (b"a", b"4"), (b"c", b"1"),
            (b"c", b"2"), (b"z", b"open"),
        ]  # fmt: skip
        clock.now += HOUR // 2
        [done] = await compactor.run_once()
        assert done.compacted
        assert [(k, v) for _, k, v in await read_rows(log, "lag")] == [
            (b"b", b"2"), (b"a", b"4"), (b"c", b"2"), (b"z", b"open")
        ]  # fmt: skip

    run(scenario)


def test_dirty_ratio_and_max_compaction_lag(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(
            compact_topic("r", min_cleanable_dirty_ratio="0.5", max_compaction_lag_ms=str(HOUR))
        )
        clock = Clock()
        for i in range(4):  # four pages of distinct keys: nothing to remove, all dirty
            await log.append(
                "r", 0, [keyed([(b"k%d" % (4 * i + j), b"v") for j in range(4)], clock.now)]
            )
        await log.append("r", 0, [keyed([(b"k0", b"new")], clock.now)])  # open page
        compactor = Compactor(log, clock=clock)
        [first] = await compactor.run_once()  # dirty ratio 1: compacted (nothing removed)
        assert first.total("records_after") == first.total("records_before") == 16
        await log.append(
            "r", 0, [keyed([(b"k1", b"new"), (b"k2", b"new"), (b"k3", b"new")], clock.now)]
        )
        await log.append("r", 0, [keyed([(b"z", b"open")], clock.now)])
        # One dirty page of five: below min.cleanable.dirty.ratio.
        [idle] = await compactor.run_once()
        assert not idle.compacted
        assert re.search(r"dirty ratio 0\.\d\d below 0\.5", idle.format())
        # --force ignores the ratio.
        [forced] = await Compactor(log, clock=clock).run_once(force=True)
        assert forced.compacted and forced.total("records_after") == 16
        assert [k for _, k, _ in await read_rows(log, "r")][:3] == [b"k4", b"k5", b"k6"]
        # max.compaction.lag.ms: a dirty page older than it is compacted whatever the ratio.
        await log.append("r", 0, [keyed([(b"k4", b"x"), (b"k5", b"x"), (b"k6", b"x")], clock.now)])
        await log.append("r", 0, [keyed([(b"y", b"open")], clock.now)])
        [idle] = await compactor.run_once()
        assert not idle.compacted
        clock.now += HOUR
        [lagging] = await compactor.run_once()
        assert lagging.compacted
        assert [k for _, k, _ in await read_rows(log, "r")][:3] == [b"k7", b"k8", b"k9"]

    run(scenario)


def test_open_page_is_never_touched(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(compact_topic("o", page_size=100))
        await log.append("o", 0, [keyed([(b"a", b"1"), (b"a", b"2"), (b"a", b"3")])])
        [done] = await Compactor(log).run_once(force=True)
        assert not done.compacted
        assert [v for _, _, v in await read_rows(log, "o")] == [b"1", b"2", b"3"]

    run(scenario)


def test_an_emptied_page_goes_and_the_log_start_stays(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(compact_topic("e"))
        for i in range(3):  # pages 0 and 1 hold only superseded values
            await log.append("e", 0, [keyed([(b"a", b"%d" % i), (b"b", b"%d" % i)])])
            await log.append("e", 0, [keyed([(b"c", b"%d" % i), (b"d", b"%d" % i)])])
        await log.append("e", 0, [keyed([(b"z", b"open")])])
        [done] = await Compactor(log).run_once()
        assert done.total("pages_removed") == 2
        p = log.keys.partition("e", 0)
        assert await log.redis.zrange(p.index, 0, -1, withscores=True) == [
            (b"2", 0.0),
            (b"3", 12.0),
        ]
        assert not await log.redis.exists(p.page(0), p.batch_index(0), p.page(1))
        state = await log.state("e", 0)
        assert (state.log_start, state.log_end, state.records) == (0, 13, 5)
        assert await log.earliest_offset("e", 0) == 0
        # Reading a removed offset gives the next record there is.
        for offset in (0, 5, 8):
            result = await log.read("e", 0, offset, max_bytes=1)
            assert read_header(result.batches[0]).base_offset == 8
        assert [o for o, _, _ in await read_rows(log, "e", 3)] == [8, 9, 10, 11, 12]
        # The archiver's view: page 2 now starts at 0 and ends where page 3 starts.
        pages = await log.closed_pages("e", 0, 0)
        assert [(pg.page, pg.first_offset, pg.next_offset) for pg in pages] == [(2, 0, 12)]
        assert await log.sequence_at("e", 0, 0) == 9  # the next record held (ids from 1)
        closed_bytes, stats_bytes, stored = await page_sizes(log, "e")
        assert closed_bytes == stats_bytes == stored

    run(scenario)


def test_a_read_inside_a_removed_tail_moves_on(make_log: Callable[[], Log]) -> None:
    """A read at an offset whose batch went, while an older batch of the page stays, must
    not return that older batch alone for ever (a consumer would loop)."""

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(compact_topic("tail", page_size=6))
        await log.append("tail", 0, [keyed([(b"keep", b"1"), (b"a", b"1")])])
        await log.append("tail", 0, [keyed([(b"b", b"1"), (b"c", b"1")])])
        await log.append("tail", 0, [keyed([(b"d", b"1"), (b"e", b"1")])])
        await log.append(
            "tail",
            0,
            [
                keyed(
                    [
                        (b"a", b"2"),
                        (b"b", b"2"),
                        (b"c", b"2"),
                        (b"d", b"2"),
                        (b"e", b"2"),
                        (b"z", b"2"),
                    ]
                )
            ],
        )
        await log.append("tail", 0, [keyed([(b"open", b"1")])])
        await Compactor(log).run_once()
        result = await log.read("tail", 0, 3, max_bytes=1)
        assert read_header(result.batches[0]).base_offset == 6

    run(scenario)


def test_the_last_closed_page_waits_for_a_later_one_to_empty(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(compact_topic("w", page_size=2, delete_retention_ms="0"))
        await log.append("w", 0, [keyed([(b"a", b"1"), (b"b", b"1")])])
        await log.append("w", 0, [keyed([(b"a", None), (b"b", None)])])  # closes; none open
        clock = Clock()
        await Compactor(log, clock=clock).run_once()
        clock.now += 1
        await Compactor(log, clock=clock).run_once()
        # Page 1 could empty, but no page follows to take its offsets: it stays.
        assert [(o, v) for o, _, v in await read_rows(log, "w")] == [(2, None), (3, None)]
        await log.append("w", 0, [keyed([(b"c", b"1")])])
        await Compactor(log, clock=clock).run_once(force=True)
        assert await read_rows(log, "w") == [(4, b"c", b"1")]
        assert (await log.state("w", 0)).log_start == 0

    run(scenario)


def test_only_archived_pages_are_compacted_when_archiving(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.enable_archiving()
        await log.create_topic(compact_topic("arch", page_size=2))
        for i in range(3):
            await log.append("arch", 0, [keyed([(b"a", b"%d" % i), (b"b", b"%d" % i)])])
        await log.append("arch", 0, [keyed([(b"z", b"open")])])
        [idle] = await Compactor(log).run_once()
        assert not idle.compacted  # nothing archived: the archive must see every record
        await log.mark_archived("arch", 0, 4)  # pages 0 and 1
        await Compactor(log).run_once()
        assert [(o, v) for o, _, v in await read_rows(log, "arch")] == [
            (2, b"1"), (3, b"1"), (4, b"2"), (5, b"2"), (6, b"open")
        ]  # fmt: skip

    run(scenario)


def test_rewrite_keeps_an_archived_pages_expiry(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(
            TopicConfig(
                "ttl", 1, page_size=2, ttl=3600, configs={"cleanup.policy": "compact,delete"}
            )
        )
        await log.append("ttl", 0, [keyed([(b"a", b"1"), (b"b", b"1")])])
        await log.append("ttl", 0, [keyed([(b"a", b"2"), (b"c", b"1")])])
        await log.append("ttl", 0, [keyed([(b"z", b"open")])])
        await Compactor(log).run_once()
        p = log.keys.partition("ttl", 0)
        assert await log.redis.lrange(p.page(0), 0, -1)  # b1 stays
        assert 0 < await log.redis.ttl(p.page(0)) <= 3600
        assert 0 < await log.redis.ttl(p.batch_index(0)) <= 3600

    run(scenario)


def test_a_page_changed_since_it_was_read_is_a_conflict(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(compact_topic("x"))
        for i in range(3):
            await log.append(
                "x", 0, [keyed([(b"a", b"%d" % i), (b"b", b"%d" % i), (b"c", b"1"), (b"d", b"1")])]
            )
        await log.append("x", 0, [keyed([(b"z", b"open")])])
        slow, fast = Compactor(log), Compactor(log)
        read_page = slow._snapshot
        reads_of_page_1 = 0

        async def snapshot_then_race(topic: str, partition: int, page: int):  # type: ignore[no-untyped-def]
            nonlocal reads_of_page_1
            taken = await read_page(topic, partition, page)
            reads_of_page_1 += page == 1
            if page == 1 and reads_of_page_1 == 2:  # read to map its keys, then to rewrite it
                await fast.run_once()  # another compactor rewrites it meanwhile
            return taken

        slow._snapshot = snapshot_then_race  # type: ignore[method-assign]
        [done] = await slow.run_once()
        assert reads_of_page_1 == 2 and done.partitions[0].conflict
        assert "changed meanwhile" in done.format()
        # What stands is the other compactor's work, whole.
        assert await read_rows(log, "x") == [
            (8, b"a", b"2"), (9, b"b", b"2"), (10, b"c", b"1"), (11, b"d", b"1"),
            (12, b"z", b"open"),
        ]  # fmt: skip
        closed_bytes, stats_bytes, stored = await page_sizes(log, "x")
        assert closed_bytes == stats_bytes == stored

        # The script itself refuses a stale page.
        p = log.keys.partition("x", 0)
        bidx = await log.redis.get(p.batch_index(2))
        with pytest.raises(Conflict):
            await log.scripts.compact(
                keys=[p.meta, p.index, p.stats],
                args=[p.prefix, 2, 0, b"4 9 0 0 0", bidx, "0 0 0 0", b""],
            )

    run(scenario)


def test_appends_during_compaction_are_kept(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(compact_topic("busy", page_size=8))
        keys = [b"k%d" % i for i in range(5)]

        async def produce(rounds: int, start: int) -> None:
            for r in range(start, start + rounds):
                await log.append("busy", 0, [keyed([(k, b"%d" % r) for k in keys[:4]])])

        await produce(10, 0)
        compactor = Compactor(log)

        async def compact(passes: int) -> None:
            for _ in range(passes):
                await compactor.run_once(force=True)

        await asyncio.gather(produce(40, 10), compact(6))
        await compactor.run_once(force=True)
        state = await log.state("busy", 0)
        assert state.log_end == 50 * 4
        got = await read_rows(log, "busy")
        latest = {k: v for _, k, v in got}
        assert latest == {k: b"49" for k in keys[:4]}
        # Offsets only grow, and every closed page holds each key once at most.
        assert [o for o, _, _ in got] == sorted({o for o, _, _ in got})
        closed_bytes, stats_bytes, stored = await page_sizes(log, "busy")
        assert closed_bytes == stats_bytes == stored

    run(scenario)


def test_retention_and_compaction_together(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(
            TopicConfig("both", 1, configs={
                "cleanup.policy": "compact,delete", "kafkaesque.page.size": "2",
                "kafkaesque.max.pages": "2",
            })
        )  # fmt: skip
        for i in range(6):
            await log.append("both", 0, [keyed([(b"k%d" % (i % 3), b"%d" % i)])])
            await Compactor(log).run_once(force=True)
        state = await log.state("both", 0)
        assert state.log_end == 6 and state.log_start > 0
        assert {k for _, k, _ in await read_rows(log, "both", state.log_start)} <= {
            b"k0",
            b"k1",
            b"k2",
        }

    run(scenario)


def test_named_topics_must_exist_and_be_compact(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("plain", 1))
        with pytest.raises(InvalidConfig, match="not compacted"):
            await Compactor(log).run_once(["plain"])
        assert await Compactor(log).run_once() == []  # plain topics are left alone

    run(scenario)


def test_policy_reads_the_topic_configs() -> None:
    config = compact_topic(
        "c", min_compaction_lag_ms="5", max_compaction_lag_ms="6",
        min_cleanable_dirty_ratio="0.25", delete_retention_ms="7",
    )  # fmt: skip
    assert Policy.of(config) == Policy(5, 6, 0.25, 7)


def test_a_compact_topics_pages_close_within_max_compaction_lag() -> None:
    """The open page is never compacted, so it closes by max.compaction.lag.ms at the latest
    (as Kafka rolls the active segment); other topics keep segment.ms."""
    assert "segment_ms 1000" in compact_topic("c", max_compaction_lag_ms="1000").lua_settings()
    plain = TopicConfig("d", 1, configs={"max.compaction.lag.ms": "1000"})
    assert f"segment_ms {7 * 24 * HOUR}" in plain.lua_settings()


def test_cli_compact_prints_a_line_per_topic(redis_url: str) -> None:
    async def create() -> None:
        log = Log(redis.asyncio.Redis.from_url(redis_url))
        await log.create_topic(compact_topic("kv"))
        await log.create_topic(TopicConfig("plain", 1))
        await log.redis.aclose()

    asyncio.run(create())
    runner = CliRunner()

    def ks(*args: str, input: bytes | None = None) -> Result:
        return runner.invoke(main, ["--redis-url", redis_url, *args], input=input)

    lines = b"".join(b"k%d\tv%d\n" % (i % 3, i) for i in range(12)) + b"open\tlast\n"
    produced = ks("produce", "kv", "--key-separator", "\t", "--batch-size", "2", input=lines)
    assert produced.exit_code == 0, produced.output

    done = ks("compact")
    assert done.exit_code == 0, done.output
    assert re.fullmatch(
        r"kv: 12 -> 3 records in 1 of 1 partitions, 3 pages rewritten \(2 removed\), "
        r"[\d,]+ bytes freed\n",
        done.stdout,
    )
    assert "compacting kv" in done.stderr
    consumed = ks("consume", "kv", "--format", "offset")
    assert consumed.exit_code == 0 and consumed.stderr == ""  # compaction's gaps are no gaps
    assert consumed.stdout.splitlines() == ["0\t9\tv9", "0\t10\tv10", "0\t11\tv11", "0\t12\tlast"]
    # A group's position after a record of a compacted batch is that record's offset + 1.
    one_line = ks("consume", "kv", "--max-records", "1", "--group", "g")
    assert one_line.stdout == "v9\n"
    assert ks("consume", "kv", "--group", "g").stdout == "v10\nv11\nlast\n"

    for args, fragment in (
        (["compact", "plain"], "topic plain is not compacted (cleanup.policy=delete)"),
        (["compact", "nosuch"], "nosuch"),
        (["compact", "bad/name"], "invalid topic name"),
    ):
        failed = ks(*args)
        assert failed.exit_code != 0 and "Traceback" not in failed.output
        assert fragment in failed.stderr and len(failed.stderr.splitlines()) == 1, failed.stderr
    again = ks("compact", "kv")
    assert again.stdout == "kv: nothing to compact (nothing new to compact)\n"


def test_an_expired_page_keeps_its_offsets_from_the_next(make_log: Callable[[], Log]) -> None:
    """A page whose TTL ran out stays indexed until the next trim: compaction must not take
    it for a page it emptied and hand its offsets to the next page (that moved the log
    start back, and a read of the expired offsets returned the next page's records)."""

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(compact_topic("e", 2, cleanup_policy="compact,delete"))
        for i in range(3):  # pages [a0 b0] [a1 b1] [a2 b2], then the open page
            await log.append("e", 0, [keyed([(b"a", b"a%d" % i), (b"b", b"b%d" % i)])])
        p = log.keys.partition("e", 0)
        await log.redis.delete(p.page(0), p.batch_index(0))  # as its TTL would
        await Compactor(log).run_once(force=True)
        # Page 1 is emptied (a2, b2 are newer) and passes its offsets on, not page 0's.
        assert await log.redis.zscore(p.index, "2") == 2
        assert (await log.state("e", 0)).log_start == 2

    run(scenario)
