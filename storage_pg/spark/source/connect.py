"""The log a planner or a task reads: opened from the options' Redis URL as the command
line does (``kafkaesque.hot.connect.open_log``: the hot store's own client, no Redis client
of ours), with the archive as its cold store but not its recovery (a reader
never restores a Redis that lost its data: the broker does that)."""

from __future__ import annotations

import gc
import os

from kafkaesque.hot import connect as hot
from kafkaesque.hot.log import Log
from storage_pg.spark.source.options import SourceOptions
from storage_pg.tiered import Archive


def open_log(
    options: SourceOptions, connections: int, archive_connections: int = 1
) -> tuple[Log, Archive | None]:
    """The log over the options' Redis (at most ``connections`` to it) and, given a pgDsn
    and ``archive_connections`` > 0, the archive (that many connections) as its cold
    store; close both with ``close_log``."""
    log = hot.open_log(options.redis_url, connections)
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


_settled = False


def settle_worker() -> None:
    """Once in a reused Spark Python worker (the planner's, a task's): freeze what is
    alive now, mostly the modules it imported (about 70,000 objects with pyarrow, numpy
    and this project), out of the cyclic collector's reach. Spark's worker runs
    gc.collect() after every task and planning call, and walking them cost about 30 ms
    of CPU each time. Outside a Spark worker (a test, the driver) nothing happens."""
    global _settled
    if not _settled and os.environ.get("SPARK_REUSE_WORKER"):
        gc.freeze()
        _settled = True
