"""`kafkaesque archive`: drain closed pages from Redis into the PostgreSQL archive."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from kafkaesque.cli.base import Context, main, pass_context, pg_dsn_option, run_async
from kafkaesque.cli.options import number_option
from kafkaesque.cli.output import echo_table
from kafkaesque.hot.outage import REDIS
from kafkaesque.tables import plural

if TYPE_CHECKING:
    from storage_pg.archiver import ArchiveSummary
    from storage_pg.cold import ArchiveStatus


@main.command()
@pg_dsn_option(
    help="The archive (env KAFKAESQUE_PG_DSN). Default: the global --pg-dsn, else a private "
    "PostgreSQL under the data directory.",
)
@click.option("--once", "mode", flag_value="once", default=True, help="One pass, then exit.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    help="Keep archiving, a pass every SECONDS, until interrupted.",
)
@click.option("--status", "mode", flag_value="status", help="Show the archive's progress.")
@number_option(
    "--idle-close",
    60.0,
    "Close open pages whose first record is older than SECONDS, so quiet partitions "
    "are archived too (0: never).",
)
@number_option(
    "--min-insync-replicas",
    1,
    "As serve's: beyond 1, Redis replicas that must have the pages before they are "
    "archived (WAIT), so a failover never forgets what the archive holds.",
    low=1,
    high=100,
)
@pass_context
@run_async
async def archive(
    ctx: Context,
    pg_dsn: str | None,
    mode: str,
    interval: float | None,
    idle_close: float,
    min_insync_replicas: int,
) -> None:
    """Archive closed pages into PostgreSQL (run it from cron: scripts/archive_cron.sh)."""
    from storage_pg.archiver import Archiver
    from storage_pg.cold import status
    from storage_pg.pool import create_pool

    given = click.get_current_context().get_parameter_source("mode")
    if interval is not None and given == click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("--once, --interval and --status are alternatives: give one")
    if mode == "status" and not pg_dsn and not ctx.pg_dsn:
        if not ctx.embedded_postgres().initialised():  # a status query creates nothing
            click.echo(NO_ARCHIVE)
            return
    if mode == "status":  # reads the archive alone, whichever Redis it belongs to
        dsn = pg_dsn or ctx.pg_dsn or ctx.embedded_archive_dsn(start=True)
    else:
        dsn = pg_dsn or ctx.required_archive_dsn()
    assert dsn is not None
    pool = await create_pool(dsn, max_size=4)
    try:
        if mode == "status":
            show_status(await status(pool))
            return
        log = ctx.log(archive=False)
        idle_ms = int(idle_close * 1000) or None
        archiver = Archiver(log, pool, idle_close_ms=idle_ms, replicas=min_insync_replicas - 1)
        if interval is not None:
            REDIS.retrying = True  # a service: Redis or PostgreSQL away is waited out, logged
            await archiver.run_forever(interval)
            return
        summary = await archiver.run_once(progress=live_progress())
        report(summary)
        if summary.problems:
            raise click.ClickException(f"{plural(len(summary.problems), 'partition')} not archived")
    finally:
        await pool.close()


def live_progress() -> Callable[[ArchiveSummary], None] | None:
    """On a terminal, a line on stderr that follows the running totals; else nothing."""
    if not sys.stderr.isatty():
        return None

    def show(summary: ArchiveSummary) -> None:
        click.echo(
            f"\rarchiving: {summary.pages:,} pages, {summary.rows:,} records, "
            f"{summary.bytes / 1e6:,.1f} MB",
            err=True,
            nl=False,
        )

    return show


def report(summary: ArchiveSummary) -> None:
    if sys.stderr.isatty():
        click.echo("\r\033[K", err=True, nl=False)
    rate = summary.rows / summary.seconds if summary.seconds else 0.0
    click.echo(
        f"archived {plural(summary.rows, 'record')} ({plural(summary.pages, 'page')}, "
        f"{summary.bytes / 1e6:,.1f} MB) from {plural(summary.partitions, 'partition')} in "
        f"{summary.seconds:.2f}s ({rate:,.0f} records/s); watermark {summary.watermark}"
        + (
            f"; {plural(summary.busy, 'partition')} busy with another archiver"
            if summary.busy
            else ""
        )
        + (
            f"; {plural(summary.rejected, 'undecodable batch', 'undecodable batches')} kept raw"
            if summary.rejected
            else ""
        ),
        err=True,
    )
    for topic in summary.compacted:
        if topic.compacted:
            click.echo(f"compacted {topic.format()}", err=True)
    for gap in summary.gaps:
        click.echo(f"gap: {gap}", err=True)
    for problem in summary.problems:
        click.echo(f"not archived: {problem}", err=True)


NO_ARCHIVE = "no archive yet: nothing was archived to this database"
NOTHING_YET = (
    "nothing archived yet: a running `kafkaesque serve` archives every 10 s, "
    "`kafkaesque archive` once; only closed pages are archived"
)


def _span(first: int, last: int) -> str:
    return f"{first}..{last}"


def show_status(state: ArchiveStatus) -> None:
    if state.schema_version == 0:
        click.echo(NO_ARCHIVE)
        return
    if state.watermark or any(p.records for p in state.partitions):
        updated = (
            state.watermark_updated.isoformat(" ", "seconds") if state.watermark_updated else "-"
        )
        promise = "every record id up to it is archived"
        if state.dropped:
            promise += " or lies in a gap below (dropped by retention before archiving)"
        if state.lost:
            promise += " or was lost with Redis (below)"
        click.echo(f"watermark: {state.watermark} ({promise}; {updated})")
    else:
        click.echo(f"watermark: 0 ({NOTHING_YET})")
    click.echo(f"schema version: {state.schema_version}")
    if state.rejected_batches:
        click.echo(f"rejected batches (kept raw): {state.rejected_batches}")
    rows = [
        [
            p.topic,
            p.partition,
            p.archived_through,
            p.records,
            p.leader_epoch,
            p.updated.isoformat(" ", "seconds") if p.updated else None,
        ]
        for p in state.partitions
    ]
    if rows:
        click.echo()
        echo_table(["TOPIC", "PARTITION", "ARCHIVED-TO", "RECORDS", "EPOCH", "UPDATED"], rows)
    if state.dropped:
        click.echo()
        click.echo("gaps (offsets dropped by retention before archiving; their ids lie in IDS):")
        echo_table(["TOPIC", "PARTITION", "OFFSETS", "IDS"], [g.row(_span) for g in state.dropped])
    if state.lost:
        click.echo()
        click.echo("lost with Redis (ids above the watermark when Redis lost its data; those")
        click.echo("not archived were lost, and their offsets given out again):")
        echo_table(
            ["IDS", "RECOVERED"],
            [
                [
                    _span(r.first_id, r.last_id),
                    r.recovered.isoformat(" ", "seconds") if r.recovered else None,
                ]
                for r in state.lost
            ],
        )
