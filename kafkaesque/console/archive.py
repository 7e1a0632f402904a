"""The Archive page, which no Kafka console has: the PostgreSQL archive's watermark; per
partition the archiver's position, its lag behind the log end, rows archived and the time
of its last archiving transaction; the ranges dropped by retention before archiving; the
ranges lost with Redis (its data lost, restored from the archive); the archiving rate
over the last minutes (the sampler's); and the archiver's last passes, each with its rate
(storage_pg/archive_passes.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from kafkaesque.console.context import console, may_see_topic, render
from kafkaesque.console.html import Raw, facts, join, message, size, sparkline, table, tag

if TYPE_CHECKING:
    from storage_pg.archive_passes import ArchivePass


def _span(first: int, last: int) -> str:
    return f"{first:,}\u2013{last:,}"


async def archive_page(request: web.Request) -> web.Response:
    state = console(request)
    if state.archive is None:
        body = message(
            "no archive: this console runs without PostgreSQL (give --pg-dsn, or use the data "
            "directory where `kafkaesque serve` set one up)",
            "note",
        )
        return render(request, "Archive", body, "/archive")
    from storage_pg.archive_passes import recent
    from storage_pg.cold import status

    pool = await state.archive.pool()
    found = await status(pool)
    if found.schema_version == 0:
        body = message("the archive database holds no archive yet: nothing was archived", "note")
        return render(request, "Archive", body, "/archive")
    partitions = [p for p in found.partitions if may_see_topic(request, p.topic)]
    offsets = await state.log.partition_offsets([(p.topic, p.partition) for p in partitions])
    rows = []
    for p, ends in zip(partitions, offsets, strict=True):
        end = None if ends is None else ends[1]
        hot = None if ends is None else ends[0]
        lag = None if end is None else max(0, end - p.archived_through)
        rows.append(
            [
                p.topic,
                p.partition,
                f"{p.archived_through:,}",
                None if end is None else f"{end:,}",
                None if lag is None else f"{lag:,}",
                None if hot is None else f"{hot:,}",
                f"{p.records:,}",
                p.leader_epoch,
                p.updated.isoformat(" ", "seconds") if p.updated else None,
            ]
        )
    samples = state.sampler.archived
    rate = state.sampler.rate(samples)
    parts: list[object] = [
        facts(
            [
                (
                    "watermark",
                    f"{found.watermark:,} (every record id up to it is archived, "
                    "or lies in a range listed below)",
                ),
                (
                    "watermark moved",
                    found.watermark_updated.isoformat(" ", "seconds")
                    if found.watermark_updated
                    else None,
                ),
                ("schema version", found.schema_version),
                ("archiving rate", "measuring\u2026" if rate is None else f"{rate:,.1f} records/s"),
                ("rows archived, last minutes", sparkline([float(n) for _, n in samples], 320, 40)),
                ("batches kept raw", f"{found.rejected_batches:,} (could not be decoded)"),
            ]
        ),
        tag("h2", "Partitions"),
        table(
            [
                "Topic",
                "Partition",
                "Archived to (next offset)",
                "Log end",
                "Archive lag",
                "Redis starts at",
                "Rows",
                "Epoch",
                "Last archived",
            ],
            rows,
            numeric=[1, 2, 3, 4, 5, 6, 7],
            empty="nothing archived yet",
            id="archive-partitions",
        ),
        tag("h2", "Last passes"),
        passes_table(await recent(pool, PASSES_SHOWN)),
        tag("h2", "Dropped before archiving"),
        table(
            ["Topic", "Partition", "Offsets", "Record ids"],
            [g.row(_span) for g in found.dropped if may_see_topic(request, g.topic)],
            numeric=[1],
            empty="no gaps: retention never dropped a record before the archive held it",
        ),
        tag("h2", "Spark exports"),
        spark_exports(state.spark_exports, found.watermark),
        tag("h2", "Lost with Redis"),
        table(
            ["Record ids", "Recovered"],
            [
                [
                    _span(r.first_id, r.last_id),
                    r.recovered.isoformat(" ", "seconds") if r.recovered else None,
                ]
                for r in found.lost
            ],
            empty="Redis never lost its data under this archive",
        ),
    ]
    return render(request, "Archive", join(parts), "/archive")


PASSES_SHOWN = 20


def passes_table(passes: list[ArchivePass]) -> Raw:
    """The archiver's last passes that archived something or moved the watermark."""
    rows = []
    for p in passes:
        rate = p.rows_per_second
        rows.append(
            [
                p.finished_at.isoformat(" ", "seconds"),
                f"{(p.finished_at - p.started_at).total_seconds():,.2f} s",
                f"{p.rows:,}",
                size(p.bytes),
                None if rate is None else f"{rate:,.1f}",
                f"{p.watermark:,}",
                p.runner,
            ]
        )
    return table(
        ["Finished", "Took", "Rows", "Bytes", "Rows/s", "Watermark after", "Run by"],
        rows,
        numeric=[1, 2, 3, 4, 5],
        empty="no pass has archived anything yet (idle passes are not recorded)",
        id="archive-passes",
    )


def spark_exports(directories: tuple[str, ...], watermark: int) -> Raw:
    """What each Parquet export (``kafkaesque spark export``, its output directory given
    with --spark-export) covered: its last committed run, read from the export's own
    commit records (storage_pg/spark/exporter.py), against the archive's watermark."""
    if not directories:
        return message(
            "none shown: give the export's output directory with --spark-export DIR", "note"
        )
    from storage_pg.spark.exporter import STATE_DIR

    rows = []
    for directory in directories:
        local = Path(directory.removeprefix("file://"))
        records = sorted(
            (local / STATE_DIR).glob("commit-*.json"), key=lambda p: p.name, reverse=True
        )
        if not records:
            rows.append([directory, "nothing exported yet", None, None, None])
            continue
        try:
            last = json.loads(records[0].read_text())
            to_id, first, count = int(last["to_id"]), int(last["from_id"]), int(last["rows"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            rows.append([directory, f"unreadable commit record: {exc}", None, None, None])
            continue
        rows.append(
            [
                directory,
                f"{to_id:,}",
                f"{_span(first, to_id)} ({count:,} rows)",
                last.get("committed_at"),
                f"{max(0, watermark - to_id):,}",
            ]
        )
    return table(
        ["Output", "Ids exported up to", "Last run", "Committed", "Archived ids not exported"],
        rows,
        numeric=[1, 4],
        id="spark-exports",
    )
