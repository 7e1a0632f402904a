"""The ``kafkaesque`` data source in a real local Spark session, over a real Redis and a
real archive: batch reads across both tiers, filters, bad options refused before any
job, transactions, data loss, streaming (Trigger.AvailableNow) and the writer.

One Redis database and one archive for the module; each test its own topics. The tests
that compare with kcat (a Kafka client reading through the broker) share a second log
of their own with a broker over it, so the broker's archiver and leadership never touch
the other tests' topics."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.errors import StreamingQueryException
from pyspark.sql.datasource import EqualTo

from storage_pg.spark.source import register
from storage_pg.spark.source.batch import BatchReader
from storage_pg.spark.source.options import read_options
from tests.pg import PostgresServer
from tests.servers import RedisServer
from tests.spark.live import BASE_MS, LiveLog, as_rows
from tests.wire.clients import kcat_path
from tests.wire.clients.kcat import kcat_consume
from tests.wire.common import Rec
from tests.wire.conftest import Broker

HALF = 120  # records per partition in each tier
KCAT_HALF = 600  # the same for the topic kcat reads
COPIED = 100_002  # records a streaming query writes for kcat to read (3 partitions)


@pytest.fixture(scope="module")
def live(redis_server: RedisServer, pg_server: PostgresServer) -> Iterator[LiveLog]:
    redis.Redis.from_url(redis_server.url).flushall()
    with pg_server.database() as dsn:
        yield LiveLog(redis_server.url, dsn)


@pytest.fixture(scope="module")
def source(spark: Any, live: LiveLog) -> Any:
    """A reader factory: ``source(subscribe="t", ...)`` with the connection options (of
    the module's log, or ``log=``'s)."""
    register(spark)

    def make(stream: bool = False, log: LiveLog = live, **options: str) -> Any:
        reader = spark.readStream if stream else spark.read
        return reader.format("kafkaesque").options(redisUrl=log.redis_url, pgDsn=log.dsn, **options)

    return make


@pytest.fixture(scope="module")
def tiered(live: LiveLog) -> str:
    """Topic "tiered": 3 partitions, offsets 0..HALF-1 only in the archive (their pages
    left Redis), HALF..2*HALF-1 only in Redis."""
    live.create("tiered", 3, page_size=20, max_pages=1)
    for p in range(3):
        live.produce("tiered", p, HALF)
    live.archive()
    for p in range(3):
        live.produce("tiered", p, HALF, first=HALF)
    for p in range(3):
        redis_start, archived, end = live.tiers("tiered", p)
        assert archived >= HALF - 20 and redis_start >= HALF - 20  # the first half left Redis
        assert archived <= HALF and end == 2 * HALF  # the second is only in Redis
    return "tiered"


@pytest.fixture(scope="module")
def brokered(
    tmp_path_factory: pytest.TempPathFactory, pg_server: PostgresServer
) -> Iterator[tuple[LiveLog, Broker]]:
    """A log of its own (Redis, archive) and a broker over it for kcat: topic "tiers",
    3 partitions, offsets 0..KCAT_HALF-1 only in the archive, the rest only in Redis.
    The broker's archiver passes as it starts (it archives the first half's closed
    pages), then not for an hour: the second half, produced after, stays in Redis."""
    if kcat_path() is None:
        pytest.skip("kcat is not installed (scripts/setup.sh)")
    directory = tmp_path_factory.mktemp("brokered")
    server = RedisServer(directory / "redis")
    try:
        with pg_server.database() as dsn:
            log = LiveLog(server.url, dsn)
            log.create("tiers", 3, page_size=100, max_pages=1)
            for p in range(3):
                log.produce("tiers", p, KCAT_HALF, per_batch=50)
            broker = Broker(server.url, directory / "broker", ["--archive-interval", "3600"], dsn)
            try:
                deadline = time.monotonic() + 60
                while "archived" not in broker.stderr():  # its pass at start is over
                    assert time.monotonic() < deadline and broker.alive(), broker.stderr()
                    time.sleep(0.1)
                log.archive()  # the last pages too
                for p in range(3):
                    log.produce("tiers", p, KCAT_HALF, first=KCAT_HALF, per_batch=50)
                    redis_start, archived, end = log.tiers("tiers", p)
                    assert KCAT_HALF - 100 <= min(archived, redis_start)
                    assert archived <= KCAT_HALF and end == 2 * KCAT_HALF
                yield log, broker
            finally:
                assert broker.stop() in (0, -15) and "Traceback" not in broker.stderr()
    finally:
        server.stop()


def kcat_records(broker: Broker, topic: str) -> list[Rec]:
    """Every record of ``topic`` as kcat reads it through the broker, from offset 0."""
    return kcat_consume(broker, topic)


def test_batch_read_across_both_tiers_equals_kcat(source: Any, brokered: Any) -> None:
    """The topic read by Spark, half from the archive and half from Redis, is what kcat
    reads through the broker from offset 0: the same records (offsets, keys, values,
    timestamps, headers), in the same order in each partition."""
    log, broker = brokered
    read = kcat_records(broker, "tiers")  # first: the broker leads the partitions by now
    df = source(log=log, subscribe="tiers", includeHeaders="true").load()
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    rows = sorted(df.collect(), key=lambda r: (r["partition"], r["offset"]))
    got = [
        Rec(
            r["partition"],
            r["offset"],
            round(r["timestamp"].timestamp() * 1000),
            None if r["key"] is None else bytes(r["key"]),
            None if r["value"] is None else bytes(r["value"]),
            tuple(
                (h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]
            ),
        )
        for r in rows
    ]
    assert len(read) == 6 * KCAT_HALF and got == read
    assert {r["timestampType"] for r in rows} == {0} and {r["topic"] for r in rows} == {"tiers"}
    assert read[3].headers == (("n", b"3"),) and read[4].headers == ()  # from the archive
    assert [r.offset for r in read if r.partition == 2] == list(range(2 * KCAT_HALF))


def test_ending_offsets_and_a_timestamp_filter(
    spark: Any, source: Any, live: LiveLog, tiered: str
) -> None:
    ending = json.dumps({tiered: {"0": 50, "1": HALF + 30, "2": -1}})
    since = BASE_MS + 1000 * 40  # offsets >= 40 (timestamp = BASE_MS + 1000 * offset)
    df = source(subscribe=tiered, endingOffsets=ending).load()
    got = as_rows(df.where(f"timestamp >= timestamp_millis({since}) AND partition < 2").collect())
    ends = {0: 50, 1: HALF + 30}
    expected = [r for r in live.holds(tiered) if r[1] < 2 and 40 <= r[2] < ends[r[1]]]
    assert got == expected and len(got) == 10 + HALF - 10
    # an offset range pushed down: only those
    exact = as_rows(
        source(subscribe=tiered).load().where("offset >= 100 AND offset < 130").collect()
    )
    assert exact == [r for r in live.holds(tiered) if 100 <= r[2] < 130]
    # pushed down: a partition filter plans that partition's ranges only
    reader = BatchReader(
        read_options({"redisUrl": live.redis_url, "pgDsn": live.dsn, "subscribe": tiered})
    )
    assert list(reader.pushFilters([EqualTo(("partition",), 1)])) == []
    planned = [r for task in reader.partitions() for r in task.ranges]
    assert {r.partition for r in planned} == {1}
    assert sum(r.end - r.start for r in planned) == 2 * HALF
    # the whole topic (3 partitions, 2 tiers each): one task per core of the session
    tasks = source(subscribe=tiered).load().rdd.getNumPartitions()
    assert tasks == spark.sparkContext.defaultParallelism == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "tiered", "startingOfsets": "earliest"}, "unknown option 'startingofsets'"),
        ({"subscribe": "nope"}, "topic 'nope' does not exist"),
        ({"subscribe": "tiered", "startingOffsets": "{tiered: 0"}, "startingOffsets is neither"),
        (
            {
                "subscribe": "tiered",
                "startingOffsets": '{"tiered": {"0": 0, "1": 0, "2": 0, "7": 0}}',
            },
            "names partition 7 of 'tiered', which has 3",
        ),
        ({"subscribe": "tiered", "startingOffsets": '{"tiered": {"0": 0}}'}, "missing: tiered[1]"),
        ({"startingOffsets": "earliest"}, "exactly one of the options subscribe"),
    ],
)
def test_bad_input_is_one_clear_error_before_any_job(
    spark: Any, source: Any, tiered: str, options: dict[str, str], message: str
) -> None:
    group = f"bad-{abs(hash(message))}"
    spark.sparkContext.setJobGroup(group, "bad input")
    try:
        with pytest.raises(Exception) as failure:
            source(**options).load().collect()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert message in str(failure.value)
    assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []


def stream_rows(
    source: Any,
    tmp_path: Path,
    topic: str,
    on_batch: Callable[[int, Any], list[Any]] | None = None,
    **options: str,
) -> tuple[list[Any], Any]:
    """Run a Trigger.AvailableNow query over ``topic`` to its end; every row it read, and
    the query. ``on_batch(batch id, DataFrame)`` (default: collect) gives a batch's rows."""
    got: list[Any] = []

    def each(df: Any, batch_id: int) -> None:
        got.extend(df.collect() if on_batch is None else on_batch(batch_id, df))

    query = (
        source(stream=True, subscribe=topic, startingOffsets="earliest", **options)
        .load()
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp_path / f"checkpoint-{uuid.uuid4().hex}"))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(StreamingQueryException):  # the test asks query.exception()
        query.awaitTermination(120)
    return got, query


def test_available_now_stops_at_the_offsets_it_saw_at_start(
    source: Any, live: LiveLog, tmp_path: Path
) -> None:
    live.create("avail", 3)
    for p in range(3):
        live.produce("avail", p, 30)
    batches: list[int] = []

    def each(batch_id: int, df: Any) -> list[Any]:
        if not batches:  # appended after the query started: past its target
            for p in range(3):
                live.produce("avail", p, 30, first=30)
        batches.append(batch_id)
        return df.collect()

    got, query = stream_rows(source, tmp_path, "avail", each, maxOffsetsPerTrigger="25")
    assert query.exception() is None
    assert len(batches) >= 4  # 90 offsets, at most 25 a batch
    assert as_rows(got) == [r for r in live.holds("avail") if r[2] < 30]


def test_aborted_records_never_appear_and_open_transactions_hold_the_stream(
    source: Any, live: LiveLog, tmp_path: Path
) -> None:
    live.create("txn", 1)
    live.produce("txn", 0, 10)  # 0..9
    live.produce("txn", 0, 10, first=10, transaction=(7001, 0))  # 10..19, then aborted
    live.end_transaction("txn", [0], 7001, commit=False)  # marker at 20
    live.produce("txn", 0, 10, first=21)  # 21..30
    live.produce("txn", 0, 5, first=31, transaction=(7002, 0))  # 31..35: open
    live.produce("txn", 0, 4, first=36)  # 36..39: behind the open transaction
    read = as_rows(source(subscribe="txn").load().collect())
    offsets = [r[2] for r in read]
    assert offsets == list(range(10)) + list(range(21, 31))  # no aborted, held at 31
    streamed, _ = stream_rows(source, tmp_path, "txn")
    assert as_rows(streamed) == read
    live.end_transaction("txn", [0], 7002, commit=True)  # marker at 40
    after = [r[2] for r in as_rows(source(subscribe="txn").load().collect())]
    assert after == offsets + list(range(31, 40))
    uncommitted = source(subscribe="txn", **{"kafka.isolation.level": "read_uncommitted"})
    assert [r[2] for r in as_rows(uncommitted.load().collect())] == list(range(20)) + list(
        range(21, 40)
    )


@pytest.fixture
def lossy(tmp_path: Path, pg_server: PostgresServer) -> Iterator[LiveLog]:
    """A log of its own (a Redis to flush): topic "lossy", 1 partition, offsets
    0..HALF-1 archived, HALF..2*HALF-1 only in Redis."""
    server = RedisServer(tmp_path / "redis")
    try:
        with pg_server.database() as dsn:
            log = LiveLog(server.url, dsn)
            log.create("lossy", 1, page_size=20, max_pages=1)
            log.produce("lossy", 0, HALF)
            log.archive()
            log.produce("lossy", 0, HALF, first=HALF)
            yield log
    finally:
        server.stop()


@pytest.mark.parametrize("fail", [True, False])
def test_redis_flushed_under_a_running_query(
    spark: Any, lossy: LiveLog, tmp_path: Path, fail: bool
) -> None:
    register(spark)
    archived = lossy.tiers("lossy", 0)[1]

    def flush_then_read(batch_id: int, df: Any) -> list[Any]:
        redis.Redis.from_url(lossy.redis_url).flushall()  # planned, not read yet
        return df.collect()

    def reader(stream: bool = True, **options: str) -> Any:
        return spark.readStream.format("kafkaesque").options(
            redisUrl=lossy.redis_url, pgDsn=lossy.dsn, **options
        )

    got, query = stream_rows(
        reader, tmp_path, "lossy", flush_then_read, failOnDataLoss=str(fail).lower()
    )
    if fail:
        error = str(query.exception())
        assert f"data loss: lossy[0] offsets {archived}..{2 * HALF - 1}" in error
    else:
        assert query.exception() is None
        assert sorted(r["offset"] for r in got) == list(range(archived))


def test_a_streaming_write_is_read_back_exactly_by_kcat(
    spark: Any, source: Any, live: LiveLog, brokered: Any, tmp_path: Path
) -> None:
    """A streaming query copies COPIED records topic to topic through the writer; kcat,
    through the broker, reads exactly those records from the copy, in order per
    partition. Then a batch write with a topic column spreads keyless rows."""
    log, broker = brokered
    log.create("copy-in", 3)
    log.create("copy-out", 3)
    for p in range(3):
        log.produce("copy-in", p, COPIED // 3, per_batch=500)
    query = (
        source(stream=True, log=log, subscribe="copy-in", startingOffsets="earliest")
        .load()
        .selectExpr("key", "value", "partition")
        .writeStream.format("kafkaesque")
        .options(redisUrl=log.redis_url, topic="copy-out")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    copied = kcat_records(broker, "copy-out")
    expected = log.holds("copy-in")
    assert len(copied) == len(expected) == COPIED
    assert [(r.partition, r.offset, r.key, r.value) for r in copied] == [
        (p, offset, key, value) for _, p, offset, key, value, _ in expected
    ]
    # a batch write: a topic column, string values, no key: spread over the partitions
    live.create("copy", 3)
    rows = [("copy", f"batch-{i}") for i in range(30)]
    frame = spark.createDataFrame(rows, "topic string, value string")
    frame.write.format("kafkaesque").mode("append").options(redisUrl=live.redis_url).save()
    added = live.holds("copy")
    assert sorted(r[4] for r in added) == sorted(v.encode() for _, v in rows)
    assert {r[1] for r in added} == {0, 1, 2}
