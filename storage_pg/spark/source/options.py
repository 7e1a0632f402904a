"""The data source's options, as Spark's Kafka source names them, checked once on the
driver into a plain, picklable ``SourceOptions`` (executors get only that).

Spark hands the options over case-insensitively (lower-cased keys). An option we do not
know is refused rather than ignored: a misspelt ``startingOfsets`` must not quietly read
from the latest offset.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from storage_pg.spark.errors import SparkJobError

EARLIEST, LATEST = -2, -1  # as in Spark's per-partition JSON


class SourceError(SparkJobError):
    """A data source option or its target is wrong; raised on the driver, before any job."""


class DataLoss(SparkJobError):
    """Offsets a query planned are held by neither the archive nor Redis."""


# option (lower case) -> what it is for; the reader and the writer take different sets.
READ_OPTIONS = {
    "subscribe": "comma-separated topics",
    "subscribepattern": "a regular expression over topic names",
    "startingoffsets": "earliest, latest or per-partition JSON",
    "endingoffsets": "latest or per-partition JSON (batch queries)",
    "startingtimestamp": "ms: start at each partition's first record at or after it",
    "maxoffsetspertrigger": "offsets per micro-batch, shared by backlog",
    "minpartitions": "split offset ranges into at least this many tasks",
    "maxrecordsperpartition": "offsets per task at most (default: one task per core)",
    "failondataloss": "true: planned offsets neither tier holds fail the query",
    "includeheaders": "true: a headers column",
    "kafka.isolation.level": "read_committed (default) or read_uncommitted",
    "isolationlevel": "read_committed (default) or read_uncommitted",
    "redisurl": "the Redis URL (default: the embedded one)",
    "pgdsn": "the archive's DSN (default: the embedded one, if set up)",
}
WRITE_OPTIONS = {
    "topic": "the topic of rows without a topic column",
    "includeheaders": "write the headers column",
    "redisurl": READ_OPTIONS["redisurl"],
    "pgdsn": READ_OPTIONS["pgdsn"],
}


_SPARK_OWN = ("path", "checkpointlocation")


@dataclass(frozen=True)
class SourceOptions:
    """What a read or a write needs, resolved: plain values only (pickled to executors)."""

    redis_url: str
    pg_dsn: str | None
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    starting: str = "earliest"  # earliest, latest, or JSON text
    ending: str = "latest"
    starting_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_per_task: int | None = None  # None: the read is spread over the cores
    fail_on_data_loss: bool = True
    include_headers: bool = False
    committed: bool = True
    topic: str | None = None  # the writer's

    def subscribes(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


def read_options(options: Mapping[str, str], streaming: bool = False) -> SourceOptions:
    """Check a reader's options (SourceError names the first wrong one)."""
    given = _known(options, READ_OPTIONS)
    topics = tuple(t.strip() for t in given.get("subscribe", "").split(",") if t.strip())
    pattern = given.get("subscribepattern")
    if bool(topics) == (pattern is not None):
        raise SourceError("give exactly one of the options subscribe and subscribePattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SourceError(
                f"subscribePattern {pattern!r} is not a regular expression: {exc}"
            ) from None
    starting = given.get("startingoffsets", "latest" if streaming else "earliest")
    check_offsets("startingOffsets", starting, allow_latest=True)
    ending = given.get("endingoffsets", "latest")
    if streaming and "endingoffsets" in given:
        raise SourceError("endingOffsets is for batch queries; a stream has no end")
    check_offsets("endingOffsets", ending, allow_latest=True, allow_earliest=False)
    level = given.get("kafka.isolation.level", given.get("isolationlevel", "read_committed"))
    if level not in ("read_committed", "read_uncommitted"):
        raise SourceError(f"isolation level {level!r}: read_committed or read_uncommitted")
    redis_url, pg_dsn = _servers(given)
    return SourceOptions(
        redis_url,
        pg_dsn,
        topics=topics,
        pattern=pattern,
        starting=starting,
        ending=ending,
        starting_timestamp=_integer(given, "startingtimestamp", "startingTimestamp", 0),
        max_offsets_per_trigger=_integer(given, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
        min_partitions=_integer(given, "minpartitions", "minPartitions"),
        max_per_task=_integer(given, "maxrecordsperpartition", "maxRecordsPerPartition"),
        fail_on_data_loss=_boolean(given, "failondataloss", "failOnDataLoss", True),
        include_headers=_boolean(given, "includeheaders", "includeHeaders", False),
        committed=level == "read_committed",
    )


def write_options(options: Mapping[str, str]) -> SourceOptions:
    """Check a writer's options."""
    given = _known(options, WRITE_OPTIONS)
    redis_url, pg_dsn = _servers(given)
    return SourceOptions(
        redis_url,
        pg_dsn,
        topic=given.get("topic") or None,
        include_headers=_boolean(given, "includeheaders", "includeHeaders", True),
    )


def check_offsets(
    name: str, text: str, allow_latest: bool = True, allow_earliest: bool = True
) -> dict[str, dict[int, int]] | None:
    """``text`` as per-partition offsets ({topic: {partition: offset}}), None for
    earliest/latest; SourceError for anything else."""
    if text in ("earliest", "latest"):
        if (text == "earliest" and not allow_earliest) or (text == "latest" and not allow_latest):
            raise SourceError(f"{name} cannot be {text}")
        return None
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise SourceError(
            f'{name} is neither earliest, latest nor JSON like {{"topic":{{"0":23,"1":-2}}}}: {exc}'
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise SourceError(f'{name} must be a JSON object like {{"topic":{{"0":23}}}}')
    offsets: dict[str, dict[int, int]] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict) or not partitions:
            raise SourceError(f"{name}: topic {topic!r} needs an object of partition: offset")
        offsets[topic] = {}
        for partition, offset in partitions.items():
            if not str(partition).isdigit() or type(offset) is not int or offset < EARLIEST:
                raise SourceError(
                    f"{name}: {topic}[{partition}]: {offset!r} is not an offset "
                    "(an integer, -2 earliest, -1 latest)"
                )
            if offset == EARLIEST and not allow_earliest:
                raise SourceError(f"{name}: {topic}[{partition}] cannot be -2 (earliest)")
            offsets[topic][int(partition)] = offset
    return offsets


def _known(options: Mapping[str, str], known: Mapping[str, str]) -> dict[str, str]:
    given = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    for spark_own in _SPARK_OWN:  # Spark's, not the source's (load(path), a checkpoint)
        given.pop(spark_own, None)
    for name in given:
        if name not in known:
            raise SourceError(f"unknown option {name!r}; the options are: {', '.join(known)}")
    return given


def _integer(given: dict[str, str], key: str, name: str, low: int = 1) -> int | None:
    if key not in given:
        return None
    try:
        value = int(given[key])
    except ValueError:
        raise SourceError(f"{name} must be an integer, not {given[key]!r}") from None
    if value < low:
        raise SourceError(f"{name} must be at least {low}, not {value}")
    return value


def _boolean(given: dict[str, str], key: str, name: str, default: bool) -> bool:
    text = given.get(key)
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise SourceError(f"{name} must be true or false, not {text!r}")
    return text.lower() == "true"


def _servers(given: dict[str, str]) -> tuple[str, str | None]:
    """The Redis URL and the archive's DSN: the options', else the environment's
    (KAFKAESQUE_REDIS_URL, KAFKAESQUE_PG_DSN), else the data directory's embedded servers,
    as the command line finds them."""
    redis_url = given.get("redisurl") or os.environ.get("KAFKAESQUE_REDIS_URL")
    pg_dsn = given.get("pgdsn") or os.environ.get("KAFKAESQUE_PG_DSN")
    if redis_url is None:
        from kafkaesque.hot.embedded import EmbeddedRedis, default_home

        home = default_home()
        embedded = EmbeddedRedis(home)
        if not embedded.exists():
            raise SourceError(f"no redisUrl option and no kafkaesque data directory in {home}")
        redis_url = embedded.ensure_started()
        if pg_dsn is None:
            from storage_pg.embedded import EmbeddedPostgres

            postgres = EmbeddedPostgres(home)
            pg_dsn = postgres.ensure_started() if postgres.initialised() else None
    return redis_url, pg_dsn
