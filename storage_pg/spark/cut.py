"""The consistent cut a run reads: the ids up to the archive watermark, read in ``id``
ranges across JDBC partitions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from storage_pg.spark.jdbc import JdbcTarget, spark_errors

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FETCH_SIZE = 10_000  # rows per round trip; also makes pgjdbc stream instead of buffer all
ROWS_PER_PARTITION_MIN = 50_000  # don't split a cut into JDBC partitions smaller than this
ROWS_PER_PARTITION_MAX = 2_000_000  # more partitions than cores once they would be bigger


@dataclass(frozen=True)
class Cut:
    """The ids a run reads: ``after < id <= watermark``; first/last are the lowest and
    highest id actually archived in that range (None when there is none)."""

    after: int
    watermark: int
    first: int | None
    last: int | None

    @property
    def empty(self) -> bool:
        return self.first is None


def archive_cut(spark: SparkSession, target: JdbcTarget, after: int = 0) -> Cut:
    """Read the watermark and the bounds of the ids above ``after`` below it, in one query."""
    after = int(after)
    query = f"""
        SELECT w.id AS watermark,
               (SELECT min(id) FROM record WHERE id > {after} AND id <= w.id) AS first_id,
               (SELECT max(id) FROM record WHERE id > {after} AND id <= w.id) AS last_id
        FROM (SELECT coalesce(max(id), 0) AS id FROM archive_watermark) AS w
    """
    with spark_errors(target):
        rows = spark.read.format("jdbc").options(**target.options(), query=query).load().collect()
    watermark, first, last = rows[0]
    return Cut(after, int(watermark), first, last)


def jdbc_partitions(spark: SparkSession, cut: Cut) -> int:
    """How many JDBC partitions to split a cut into: one per core the master offers
    (more when they would exceed ROWS_PER_PARTITION_MAX ids), never below
    ROWS_PER_PARTITION_MIN ids each."""
    if cut.empty:
        return 1
    span = cut.last - cut.first + 1  # type: ignore[operator]
    wanted = max(spark.sparkContext.defaultParallelism, math.ceil(span / ROWS_PER_PARTITION_MAX))
    return max(1, min(wanted, math.ceil(span / ROWS_PER_PARTITION_MIN)))


def read_cut(
    spark: SparkSession,
    target: JdbcTarget,
    cut: Cut,
    table: str = "record",
    partitions: int | None = None,
) -> DataFrame:
    """The archive's rows of ``cut`` as a DataFrame read in ``id`` ranges. ``table`` may be a
    parenthesised subquery over ``record`` (with an ``id`` column) to project in PostgreSQL."""
    if cut.empty:
        raise ValueError("empty cut")
    n = partitions or jdbc_partitions(spark, cut)
    reader = spark.read.format("jdbc").options(**target.options())
    reader = reader.options(
        dbtable=table,
        partitionColumn="id",
        lowerBound=str(cut.first),
        upperBound=str(cut.last + 1),  # type: ignore[operator]
        numPartitions=str(n),
        fetchsize=str(FETCH_SIZE),
    )
    with spark_errors(target):
        df = reader.load()
    return df.where(f"id > {cut.after} AND id <= {cut.watermark}")


@dataclass(frozen=True)
class Gap:
    """Offsets of a partition retention dropped before archiving; their ids lie in
    first_id..last_id."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    first_id: int
    last_id: int

    def format(self) -> str:
        return (
            f"{self.topic}[{self.partition}] offsets {self.first_offset:,}..{self.last_offset:,} "
            f"(ids within {self.first_id:,}..{self.last_id:,})"
        )


@dataclass(frozen=True)
class Lost:
    """Ids above the watermark when Redis lost its data: those not archived were lost."""

    first_id: int
    last_id: int

    def format(self) -> str:
        return f"ids {self.first_id:,}..{self.last_id:,}"


def _ranges_in_cut(
    spark: SparkSession, target: JdbcTarget, cut: Cut, table: str, columns: str, order: str
) -> list[tuple]:
    """Rows of ``table`` whose id range (first_id..last_id) meets the cut; none where the
    archive predates the table."""
    known = f"SELECT to_regclass('{table}') IS NOT NULL AS known"
    query = f"""
        SELECT {columns} FROM {table}
        WHERE last_id > {int(cut.after)} AND first_id <= {int(cut.watermark)}
        ORDER BY {order}
    """
    with spark_errors(target):
        read = spark.read.format("jdbc").options(**target.options())
        if not read.option("query", known).load().collect()[0][0]:
            return []
        rows = spark.read.format("jdbc").options(**target.options(), query=query).load()
        return [tuple(row) for row in rows.collect()]


def gaps_in_cut(spark: SparkSession, target: JdbcTarget, cut: Cut) -> list[Gap]:
    """The gaps (dropped_range, schema version 3) whose ids meet the cut: records the cut
    lacks not because they are late but because retention dropped them."""
    columns = "topic, partition, first_offset, last_offset, first_id, last_id"
    rows = _ranges_in_cut(spark, target, cut, "dropped_range", columns, "1, 2, 3")
    return [Gap(*row) for row in rows]


def lost_in_cut(spark: SparkSession, target: JdbcTarget, cut: Cut) -> list[Lost]:
    """The ids lost with Redis (lost_range, schema version 5) that meet the cut."""
    rows = _ranges_in_cut(spark, target, cut, "lost_range", "first_id, last_id", "1")
    return [Lost(*row) for row in rows]
