"""The data source's pieces without Spark running: options, the sharing of
maxOffsetsPerTrigger, range splitting, pushed filters, the Arrow columns and the bulk
decoders (fast: in the quick lane)."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import InvalidRecord
from kafkaesque.hot.log import Log
from kafkaesque.records.batch import HEADER_SIZE
from kafkaesque.records.build import build_batch, build_control_batch, rewrite_batch
from kafkaesque.records.compression import Compression
from storage_pg.spark.source.columns import Columns, headers_type
from storage_pg.spark.source.filters import Bounds
from storage_pg.spark.source.options import DataLoss, SourceError, read_options, write_options
from storage_pg.spark.source.plan import (
    CORES_ENV,
    MIN_PIECE,
    PartitionNow,
    ranges,
    share,
    spread,
    tasks,
)
from storage_pg.spark.source.tiers import OffsetRange, read_range
from storage_pg.spark.source.vectors import archived_rows, log_rows
from tests.spark.live import LiveLog

URL = {"redisUrl": "redis://127.0.0.1:1/0"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t", "startingOfsets": "earliest"}, "unknown option 'startingofsets'"),
        ({"subscribe": "t", "subscribePattern": "t.*"}, "exactly one of the options"),
        ({}, "exactly one of the options"),
        ({"subscribePattern": "(("}, "is not a regular expression"),
        ({"subscribe": "t", "startingOffsets": "{t:"}, "startingOffsets is neither"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"0": -3}}'}, "is not an offset"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"x": 1}}'}, "is not an offset"),
        ({"subscribe": "t", "endingOffsets": "earliest"}, "endingOffsets cannot be earliest"),
        ({"subscribe": "t", "failOnDataLoss": "yes"}, "must be true or false"),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "0"}, "at least 1"),
        ({"subscribe": "t", "kafka.isolation.level": "dirty"}, "read_committed or"),
    ],
)
def test_bad_options_are_refused_with_one_line(options: dict[str, str], message: str) -> None:
    with pytest.raises(SourceError, match=message):
        read_options({**URL, **options})


def test_options_as_sparks_kafka_source() -> None:
    parsed = read_options(
        {
            **URL,
            "SUBSCRIBE": "a, b",
            "failOnDataLoss": "False",
            "includeHeaders": "true",
            "checkpointLocation": "/x",  # Spark's own
        }
    )
    assert parsed.topics == ("a", "b") and parsed.starting == "earliest"
    assert not parsed.fail_on_data_loss and parsed.include_headers and parsed.committed
    assert read_options({**URL, "subscribe": "a"}, streaming=True).starting == "latest"
    with pytest.raises(SourceError, match="a stream has no end"):
        read_options({**URL, "subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    assert write_options({**URL, "topic": "t"}).topic == "t"
    with pytest.raises(SourceError, match="unknown option 'subscribe'"):
        write_options({**URL, "subscribe": "t"})


def test_max_offsets_per_trigger_is_shared_by_backlog() -> None:
    starts = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    latest = {("t", 0): 900, ("t", 1): 200, ("t", 2): 50}
    ends = share(starts, latest, 100)
    assert sum(ends[tp] - starts[tp] for tp in starts) == 100
    assert ends[("t", 0)] - starts[("t", 0)] == 90 and ends[("t", 2)] == 50
    assert share(starts, latest, 10_000) == latest
    assert share(starts, latest, 1)[("t", 0)] == 1  # a batch always moves on


def test_min_partitions_splits_ranges_in_proportion() -> None:
    now = {("t", p): PartitionNow("id", 3, 1000) for p in range(2)}
    planned = ranges({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 10}, now, 4)
    assert [(r.partition, r.start, r.end) for r in planned] == [
        (0, 0, 250),
        (0, 250, 500),
        (0, 500, 750),
        (0, 750, 1000),
        (1, 0, 10),
    ]
    assert {r.epoch for r in planned} == {3}
    capped = ranges(
        {("t", 0): 5, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 10}, now, None, None, 400
    )
    assert [(r.start, r.end) for r in capped] == [(5, 337), (337, 669), (669, 1000), (0, 10)]


def test_a_read_is_spread_over_the_cores_with_both_tiers_in_each_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """By default a read is one task per core, each with an equal piece of every
    partition's archived part and of its Redis part; a range too small to cut goes to
    the least loaded task; each offset is planned once."""
    now = {("t", p): PartitionNow("id", 3, 10**6) for p in range(3)}
    size = 8 * MIN_PIECE
    ends = {("t", 0): size, ("t", 1): size, ("t", 2): 10}
    planned = ranges(dict.fromkeys(ends, 0), ends, now)
    marks = {("t", 0): size // 2, ("t", 1): 0}  # partition 1 only in Redis, 2 unknown
    two = spread(planned, 2, marks)
    assert [[(r.partition, r.start, r.end) for r in task.ranges] for task in two] == [
        [(0, 0, size // 4), (0, size // 2, 3 * size // 4), (1, 0, size // 2), (2, 0, 10)],
        [(0, size // 4, size // 2), (0, 3 * size // 4, size), (1, size // 2, size)],
    ]
    assert {r.epoch for task in two for r in task.ranges} == {3}
    # one task: a partition's pieces end to end are one range again
    [one] = spread(planned, 1, marks)
    assert [(r.partition, r.start, r.end) for r in one.ranges] == [
        (0, 0, size),
        (1, 0, size),
        (2, 0, 10),
    ]
    # a stream's ranges are dealt whole: each partition read by one task, in order
    whole = spread(planned, 2, marks, cut=False)
    assert [[(r.partition, r.start, r.end) for r in task.ranges] for task in whole] == [
        [(0, 0, size), (2, 0, 10)],
        [(1, 0, size)],
    ]
    # as many tasks as register() found cores
    monkeypatch.setenv(CORES_ENV, "3")
    assert len(tasks(planned, read_options({**URL, "subscribe": "t"}), marks)) == 3
    # asked for (maxRecordsPerPartition, minPartitions): each range a task of its own
    options = read_options({**URL, "subscribe": "t", "maxRecordsPerPartition": str(size)})
    assert [len(task) for task in tasks(planned, options, marks)] == [size, size, 10]


def test_pushed_filters_cut_ranges() -> None:
    bounds = Bounds()
    moment = datetime.datetime(2024, 1, 1, 0, 0, 1, 500, tzinfo=datetime.UTC)
    filters = [
        EqualTo(("topic",), "t"),
        In(("partition",), (0, 2)),
        GreaterThanOrEqual(("offset",), 10),
        LessThan(("offset",), 50),
        GreaterThan(("timestamp",), moment),
        EqualTo(("value",), b"x"),
    ]
    left = list(bounds.take(filters))
    assert left == [filters[4], filters[5]]  # Spark still applies timestamp and value
    assert bounds.allows("t", 2) and not bounds.allows("t", 1) and not bounds.allows("u", 0)
    assert bounds.cut(0, 100) == (10, 50) and bounds.cut(60, 100)[0] >= 50
    assert bounds.since_ms == 1_704_067_201_000


def test_columns_skip_markers_and_aborted_batches() -> None:
    columns = Columns("t", 1, include_headers=True)
    plain = build_batch([b"a", b"b"], [None, b"k"], timestamps=[5, 6], headers=[[("h", b"1")], []])
    txn = build_batch(
        [b"x"], base_offset=2, producer_id=9, producer_epoch=0, base_sequence=0, transactional=True
    )
    marker = build_control_batch(9, 0, commit=False)
    columns.add_batch(plain, 1, 10, [])  # offset 0 is below the range
    columns.add_batch(txn, 0, 10, [(9, 2, 3)])
    columns.add_batch(marker, 0, 10, [])
    batch = columns.arrow()
    assert batch.num_rows == 1 and len(columns) == 0
    assert batch.column("key").to_pylist() == [b"k"]
    assert batch.column("offset").to_pylist() == [1]
    assert batch.column("headers").type == headers_type()
    assert batch.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [6000]


def test_a_leader_epoch_change_under_a_range_is_checked(redis_url: str) -> None:
    """A range planned under one leader epoch, read under the next: offsets the old epoch
    had are read as planned; offsets past where the new epoch began may have been lost
    and handed out again, which is data loss."""
    live = LiveLog(redis_url, "")

    async def setup(log: Log) -> tuple[str, int]:
        await log.create_topic(TopicConfig("e", 1))
        for i in range(10):
            await log.append("e", 0, [build_batch([b"v%d" % i])])
        await log.lead([("e", 0, "", "a-broker")])
        [(_, _, epoch, _)] = await log.partition_offsets([("e", 0)])
        [moved] = await log.lead([("e", 0, "a-broker", "another-broker")])  # a new epoch
        assert moved is not None and moved[2] > epoch
        return (await log.topic("e")).topic_id.hex(), epoch

    topic_id, epoch = live.run_hot(setup)
    options = read_options({"redisUrl": redis_url, "subscribe": "e"})
    planned = OffsetRange("e", 0, 0, 10, topic_id, epoch, epoch)
    assert sum(b.num_rows for b in read_range(options, planned)) == 10  # no loss there
    beyond = OffsetRange("e", 0, 5, 15, topic_id, epoch, epoch)
    with pytest.raises(DataLoss, match=r"data loss: e\[0\] offsets 10\.\.14 may hold other"):
        list(read_range(options, beyond))


def _decoded(batch: pa.RecordBatch) -> list[tuple[object, ...]]:
    return list(zip(*(batch.column(i).to_pylist() for i in range(batch.num_columns)), strict=True))


@pytest.mark.parametrize("include_headers", [False, True])
def test_the_bulk_decoder_reads_what_the_record_parser_reads(include_headers: bool) -> None:
    """log_rows (numpy over whole reads) and Columns (parse_record, record by record)
    give the same rows: null and empty keys and values, multi-byte varints (long
    values, negative timestamp deltas, offset deltas past 63), LogAppendTime, a
    compressed batch, compacted gaps, markers, aborted batches and the range's bounds;
    headers are read by the parser alone (the bulk decoder says None)."""
    values = [None, b"", b"v" * 300, b"w" * 20_000] + [b"%d" % i for i in range(100)]
    keys = [b"k", None, b"", b"key" * 50] + [None if i % 3 else b"%d" % i for i in range(100)]
    stamps = [1_000, 900, 5_000_000, 1] + [2_000 + i for i in range(100)]
    stored = [
        build_batch(values, keys, timestamps=stamps),
        build_batch(
            [b"gz-%d" % i for i in range(70)],
            base_offset=104,
            compression=Compression.GZIP,
            offset_deltas=[2 * i for i in range(70)],
        ),
        build_batch(
            [b"aborted"],
            base_offset=300,
            producer_id=9,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        ),
        build_control_batch(9, 0, commit=False),  # base offset 0: skipped as a marker
        rewrite_batch(
            build_batch([b"late", None], [b"x", b"y"], base_offset=302), log_append_time=77
        ),
    ]
    aborted = [(9, 300, 301)]
    for low, high in ((0, 1 << 40), (2, 180), (303, 304)):
        rows = log_rows(stored, low, high, aborted, include_headers)
        assert rows is not None
        columns = Columns("t", 4, include_headers)
        for batch in stored:
            columns.add_batch(batch, low, high, aborted)
        expected = columns.arrow()
        got = rows.batch("t", 4)
        assert got.schema == expected.schema
        assert _decoded(got) == _decoded(expected) and got.num_rows > 0
    with_headers = [build_batch([b"a", b"b"], headers=[[("h", b"1")], []])]
    rows = log_rows(with_headers, 0, 10, [], include_headers)
    if include_headers:
        assert rows is None  # the record parser reads them
    else:
        assert rows is not None and rows.values.to_pylist() == [b"a", b"b"]


def test_the_bulk_decoder_leaves_malformed_records_to_the_record_parser() -> None:
    """A record whose length disagrees with its fields (the CRC made to match) is not
    decoded in bulk: the record parser then raises its InvalidRecord."""
    records = bytearray(build_batch([b"abc", b"def"])[HEADER_SIZE:])
    assert records[5] == 6  # the first record's value length, 3 (zigzag)
    records[5] = 8  # 4: past the value, over the header count
    bad = rewrite_batch(
        build_batch([b"abc", b"def"]), records=bytes(records), compression=Compression.NONE
    )
    assert log_rows([bad], 0, 10, [], False) is None
    with pytest.raises(InvalidRecord):
        Columns("t", 0, False).add_batch(bad, 0, 10, [])


def test_archived_columns_decode_nulls_order_and_times() -> None:
    """One ARCHIVED answer: packed big-endian columns, null keys, values and timestamps,
    and rows PostgreSQL's aggregate happened to see out of offset order put back."""
    offsets, micros = [7, 5, 6], [0, -1_500, 1_700_000_000_123_456]
    since_2000 = [m - 946_684_800_000_000 for m in micros]
    since_2000[0] = -(2**63)  # -infinity: a null timestamp
    row = (
        3,
        b"".join(o.to_bytes(8, "big") for o in offsets),
        b"".join(t.to_bytes(8, "big", signed=True) for t in since_2000),
        b"ab",
        b"".join(n.to_bytes(4, "big", signed=True) for n in (-1, 0, 2)),
        b"xyz",
        b"".join(n.to_bytes(4, "big", signed=True) for n in (3, -1, 0)),
    )
    batch = archived_rows(row, 1).batch("t", 0)
    assert batch.column("offset").to_pylist() == [5, 6, 7]
    assert batch.column("key").to_pylist() == [b"", b"ab", None]
    assert batch.column("value").to_pylist() == [None, b"", b"xyz"]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [
        -2_000,  # -1.5 ms rounds away from zero, as the archive's ms did
        1_700_000_000_123_000,
        None,
    ]
    assert batch.column("timestampType").to_pylist() == [1, 1, 1]
