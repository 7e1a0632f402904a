"""The log a planner or a task reads: opened from the options' Redis URL as the command
line opens it (``kafkaesque.cli.context.Context.log``: the hot store's own client, no
Redis client of ours), with the archive as its cold store but not its recovery (a reader
never restores a Redis that lost its data: the broker does that)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from storage_pg.spark.source.options import SourceOptions
from storage_pg.tiered import Archive

if TYPE_CHECKING:
    from kafkaesque.hot.log import Log


def open_log(
    options: SourceOptions, connections: int, archive_connections: int = 1
) -> tuple[Log, Archive | None]:
    """The log over the options' Redis (at most ``connections`` to it) and, given a pgDsn
    and ``archive_connections`` > 0, the archive (that many connections) as its cold
    store; close both with ``close_log``. (The command line's modules are imported on the
    first call: a Python worker that plans or reads pays for them once.)"""
    from kafkaesque.cli.context import Context

    log = Context(options.redis_url, None).log(archive=False, max_connections=connections)
    archive = None
    if archive_connections and options.pg_dsn is not None:
        archive = Archive(options.pg_dsn, max_connections=archive_connections)
    log.cold = archive
    return log, archive


async def close_log(log: Log, archive: Archive | None) -> None:
    """Close what ``open_log`` opened."""
    if archive is not None:
        await archive.close()
    await log.stores.close()
