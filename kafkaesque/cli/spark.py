"""`kafkaesque spark export|report`: the Spark jobs over the PostgreSQL archive.

``scripts/spark_job.py`` runs this same group under spark-submit, so both take the same
arguments. PySpark is imported only when a job runs: the rest of the CLI needs no [spark] extra.
"""

from __future__ import annotations

import click

from kafkaesque.cli.base import (
    Context,
    main,
    one_line_errors,
    option_group,
    pass_context,
    pg_dsn_option,
)
from kafkaesque.cli.options import number_option


@main.group()
def spark() -> None:
    """Read the PostgreSQL archive with Spark: Parquet export, report."""


# The options both jobs take: where the archive is, which Spark, how parallel.
job_options = option_group(
    pg_dsn_option(
        help="The archive (env KAFKAESQUE_PG_DSN). Default: the global --pg-dsn, else the "
        "private PostgreSQL under the data directory (reachable over TCP: JDBC needs it).",
    ),
    click.option(
        "--master",
        default="local[*]",
        show_default=True,
        help="Spark master URL (spark://..., yarn, k8s://...). Under spark-submit, "
        "spark-submit's own --master wins.",
    ),
    click.option(
        "--partitions",
        type=click.IntRange(min=1),
        help="JDBC partitions (parallel reads) to split the archive into. "
        "Default: one per core the master offers, each at least 50,000 ids.",
    ),
)


def archive_dsn(ctx: Context, pg_dsn: str | None) -> str:
    """The archive to read; never creates an empty one to report on."""
    if pg_dsn:
        return pg_dsn
    with one_line_errors():
        # Spark reads the archive alone, whichever Redis it belongs to.
        dsn = ctx.pg_dsn or ctx.embedded_archive_dsn(start=False)
    if dsn is None:
        raise click.ClickException(
            "no archive: give --pg-dsn, or archive into the embedded PostgreSQL first "
            "(kafkaesque archive, or kafkaesque serve)"
        )
    return dsn


@spark.command()
@job_options
@click.option(
    "--out",
    required=True,
    help="The Parquet dataset's directory: a local path or any URI Spark writes "
    "(hdfs://, s3a://; shared by all workers on a cluster).",
)
@pass_context
def export(ctx: Context, pg_dsn: str | None, master: str, partitions: int | None, out: str) -> None:
    """Export the records archived since the last run as Parquet, by topic and date.

    Reads up to the archive watermark, so every run sees a gapless cut; reruns neither
    skip nor duplicate, also after a crash. Run it from cron after the archiver."""
    dsn = archive_dsn(ctx, pg_dsn)
    with one_line_errors():
        from storage_pg.spark import export as run_export

        summary = run_export(dsn, out, master, partitions=partitions)
    click.echo(summary.format(), err=True)


@spark.command()
@job_options
@click.option(
    "--png",
    type=click.Path(dir_okay=False, writable=True),
    help="Also draw records per topic per hour into this PNG file.",
)
@number_option("--top", 10, "How many top keys to show per topic.", low=1)
@pass_context
def report(
    ctx: Context,
    pg_dsn: str | None,
    master: str,
    partitions: int | None,
    png: str | None,
    top: int,
) -> None:
    """Print records and bytes per topic per hour, top keys and produce-to-archive lag."""
    dsn = archive_dsn(ctx, pg_dsn)
    with one_line_errors():
        from storage_pg.spark import report as run_report

        result = run_report(dsn, png, master, top=top, partitions=partitions)
    click.echo(result.format())
