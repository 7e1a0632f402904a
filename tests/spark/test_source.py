"""The ``kafkaesque`` data source in a real local Spark session, over a real Redis and a
real archive: batch reads across both tiers, filters, bad options refused before any
job, transactions, data loss, streaming (Trigger.AvailableNow) and the writer.

One Redis database and one archive for the module; each test its own topics."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from storage_pg.spark.source import register
from tests.pg import PostgresServer
from tests.servers import RedisServer
from tests.spark.live import BASE_MS, LiveLog, as_rows

HALF = 120  # records per partition in each tier


@pytest.fixture(scope="module")
def live(redis_server: RedisServer, pg_server: PostgresServer) -> Iterator[LiveLog]:
    redis.Redis.from_url(redis_server.url).flushall()
    with pg_server.database() as dsn:
        yield LiveLog(redis_server.url, dsn)


@pytest.fixture(scope="module")
def source(spark: Any, live: LiveLog) -> Any:
    """A reader factory: ``source(subscribe="t", ...)`` with the connection options."""
    register(spark)

    def make(stream: bool = False, **options: str) -> Any:
        reader = spark.readStream if stream else spark.read
        return reader.format("kafkaesque").options(
            redisUrl=live.redis_url, pgDsn=live.dsn, **options
        )

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


def test_batch_read_across_both_tiers_is_what_the_log_holds(
    source: Any, live: LiveLog, tiered: str
) -> None:
    df = source(subscribe=tiered, includeHeaders="true").load()
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
    rows = df.collect()
    got = as_rows(rows)
    expected = live.holds(tiered)
    assert len(got) == 6 * HALF and got == expected
    by_offset = {(r["partition"], r["offset"]): r for r in rows}
    assert [tuple(h) for h in by_offset[0, 3]["headers"]] == [("n", b"3")]  # archive
    assert [tuple(h) for h in by_offset[2, HALF + 3]["headers"]] == [("n", str(HALF + 3).encode())]
    assert by_offset[1, 4]["headers"] == [] and by_offset[1, 4]["timestampType"] == 0


def test_ending_offsets_and_a_timestamp_filter(source: Any, live: LiveLog, tiered: str) -> None:
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
