"""Spark jobs over the archive: an incremental Parquet export and a report.

Both read the PostgreSQL ``record`` table through Spark's JDBC source, and only the
consistent cut the archive guarantees: every record with ``id <= archive_watermark.id`` is
archived and there are no gaps below it, so a run reads the watermark once and never looks
above it. The read is split by ``id`` ranges across ``numPartitions`` JDBC connections;
``lowerBound``/``upperBound`` are the first and last id actually in the cut (one index probe
each), so the stride covers the cut and nothing else, and ``id > last AND id <= watermark`` is
pushed down into every partition's query (Spark's first and last partitions are otherwise
open-ended).

Nothing here runs Python on the executors (no UDFs): the executors need the JVM, network
access to PostgreSQL and the JDBC driver jar, which Spark ships to them itself (``spark.jars``
is served from the driver). The export's output directory is any URI Spark and Hadoop can
write (``file:``, ``hdfs://``, ``s3a://``, ...); with a cluster it must be a shared one.

- ``export(dsn, out_dir)``: new records since the last run as Parquet (storage_pg.spark.exporter);
- ``report(dsn, png)``: per-topic hourly volumes, top keys, archive lag (storage_pg.spark.reporter);
- the pieces they share: the JDBC target and driver jar (jdbc), the session (session), the
  cut up to the watermark (cut), the errors (errors).

PySpark is imported only when a job runs, so importing this package needs no [spark] extra.
The command line is ``kafkaesque spark export|report`` (or ``spark-submit
scripts/spark_job.py`` with the same arguments).
"""

from storage_pg.spark.cut import Cut, archive_cut, jdbc_partitions, read_cut
from storage_pg.spark.errors import ArchiveUnreachable, JdbcDriverMissing, SparkJobError
from storage_pg.spark.exporter import (
    ExportState,
    ExportSummary,
    export,
    export_schema,
    read_export,
)
from storage_pg.spark.jdbc import JAR_ENV, JdbcTarget, find_jdbc_jar, jdbc_target
from storage_pg.spark.reporter import Report, chart_unit, report, write_chart
from storage_pg.spark.session import spark_session

__all__ = [
    "JAR_ENV",
    "ArchiveUnreachable",
    "Cut",
    "ExportState",
    "ExportSummary",
    "JdbcDriverMissing",
    "JdbcTarget",
    "Report",
    "SparkJobError",
    "archive_cut",
    "chart_unit",
    "export",
    "export_schema",
    "find_jdbc_jar",
    "jdbc_partitions",
    "jdbc_target",
    "read_cut",
    "read_export",
    "report",
    "spark_session",
    "write_chart",
]
