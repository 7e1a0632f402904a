"""The data source's pieces without Spark running: options, the sharing of
maxOffsetsPerTrigger, range splitting, pushed filters and the Arrow columns (fast: in the
quick lane)."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.log import Log
from kafkaesque.records.build import build_batch, build_control_batch
from storage_pg.spark.source.columns import Columns, headers_type
from storage_pg.spark.source.filters import Bounds
from storage_pg.spark.source.options import DataLoss, SourceError, read_options, write_options
from storage_pg.spark.source.plan import PartitionNow, ranges, share
from storage_pg.spark.source.tiers import OffsetRange, read_range
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
    planned = OffsetRange("e", 0, 0, 10, topic_id, epoch)
    assert sum(b.num_rows for b in read_range(options, planned)) == 10  # no loss there
    beyond = OffsetRange("e", 0, 5, 15, topic_id, epoch)
    with pytest.raises(DataLoss, match=r"data loss: e\[0\] offsets 10\.\.14 may hold other"):
        list(read_range(options, beyond))
