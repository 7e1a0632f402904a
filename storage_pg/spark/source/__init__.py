"""A PySpark data source over the live log: ``spark.read.format("kafkaesque")``,
``readStream``, ``write`` and ``writeStream``, one table over the archive and Redis.

The schema and options are Spark's Kafka source's (docs/spark.md lists them), so Spark
code written for Kafka ports by changing the format name and the connection options.

- Planning, on the driver: a query is a set of offset ranges, one per partition (more
  with minPartitions), from Redis' and the archive's offsets (storage_pg.spark.source.plan,
  .batch, .stream; filters on topic, partition, offset and timestamp cut them: .filters).
- Reading, on the executors: each range below the partition's archived mark from
  PostgreSQL, the rest through the log from Redis, connections opened in the task
  (storage_pg.spark.source.tiers), as Arrow batches (.columns). Same range, same rows:
  with Spark's checkpoint a streaming query is exactly-once. Offsets neither tier holds
  are data loss (an error, or a warning with failOnDataLoss=false).
- Writing: rows appended through the partition layer by an idempotent producer per task,
  at least once (.writer).

``register(spark)`` makes the format known to a session (and turns on Spark's filter
pushdown for Python data sources). PySpark must be installed to import this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from storage_pg.spark.source.batch import NAME, KafkaesqueSource
from storage_pg.spark.source.options import DataLoss, SourceError
from storage_pg.spark.source.plan import CORES_ENV

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["NAME", "DataLoss", "KafkaesqueSource", "SourceError", "register"]


def register(spark: SparkSession) -> SparkSession:
    """Make ``format("kafkaesque")`` known to ``spark``; returns it. The planner learns the
    session's cores from here (a read is one task per core)."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    # The Python workers Spark starts from now on (the planner's among them) get these.
    # (A Spark Connect session has no SparkContext: its reads plan for 2 cores.)
    context = getattr(spark, "sparkContext", None)
    if context is not None:
        context.environment[CORES_ENV] = str(context.defaultParallelism)
    spark.dataSource.register(KafkaesqueSource)
    return spark
