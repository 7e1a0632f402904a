"""The archiver's recent passes (migration 12): one ``archive_pass`` row per pass that
archived records or moved the watermark, for the console's Archive page.

Idle passes write nothing, so an archiver run every minute by cron does not fill the table
with empty rows; and the table keeps only the newest ``KEEP`` rows (older ones are deleted
in the inserting transaction), so it stays small however long the archive runs. Whether
the watermark moved is judged against the last recorded pass, so one-shot archivers (a
new process each pass) are judged the same as a long-running one.
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass

import asyncpg

KEEP = 1_000  # rows kept: the newest passes

MIGRATION = """
    CREATE TABLE archive_pass (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        started_at timestamptz NOT NULL,
        finished_at timestamptz NOT NULL,
        rows bigint NOT NULL,
        bytes bigint NOT NULL,
        watermark bigint NOT NULL,
        runner text NOT NULL
    );
    COMMENT ON TABLE archive_pass IS
        'the archiver''s recent passes that archived records or moved the watermark (the '
        'newest 1000); runner is host:pid of the process that ran the pass';
"""

# Inserts nothing for an idle pass: no rows and the watermark where the last pass left it.
_INSERT = """
    INSERT INTO archive_pass (started_at, finished_at, rows, bytes, watermark, runner)
    SELECT now - make_interval(secs => $1::float8), now, $2::bigint, $3::bigint, $4::bigint,
           $5::text
    FROM (SELECT clock_timestamp() AS now) AS t
    WHERE $2::bigint > 0
       OR $4::bigint <> coalesce((SELECT watermark FROM archive_pass ORDER BY id DESC LIMIT 1), 0)
    RETURNING id
"""
_TRIM = """
    DELETE FROM archive_pass
    WHERE id < (SELECT id FROM archive_pass ORDER BY id DESC OFFSET $1 LIMIT 1)
"""


@dataclass(frozen=True, slots=True)
class ArchivePass:
    """One recorded pass."""

    started_at: datetime.datetime
    finished_at: datetime.datetime
    rows: int
    bytes: int
    watermark: int
    runner: str

    @property
    def rows_per_second(self) -> float | None:
        """The pass's archiving rate (None for a pass too short to time)."""
        seconds = (self.finished_at - self.started_at).total_seconds()
        return self.rows / seconds if seconds > 0 else None


async def record(pool: asyncpg.Pool, seconds: float, rows: int, size: int, watermark: int) -> bool:
    """Record a pass that took ``seconds`` and ended now, unless it was idle; keep the
    newest ``KEEP`` rows. Returns whether a row was written."""
    runner = f"{socket.gethostname()}:{os.getpid()}"
    async with pool.acquire() as conn, conn.transaction():
        written = await conn.fetchval(_INSERT, seconds, rows, size, watermark, runner)
        if written is None:
            return False
        await conn.execute(_TRIM, KEEP - 1)  # the KEEP-th newest is the oldest kept
    return True


async def recent(pool: asyncpg.Pool, limit: int = 20) -> list[ArchivePass]:
    """The newest ``limit`` passes, newest first ([] in an archive older than the table)."""
    async with pool.acquire() as conn:
        if await conn.fetchval("SELECT to_regclass('archive_pass')") is None:
            return []
        found = await conn.fetch(
            # as epoch seconds: the same whatever timestamptz codec the pool has
            """SELECT extract(epoch FROM started_at)::float8,
                      extract(epoch FROM finished_at)::float8, rows, bytes, watermark, runner
               FROM archive_pass ORDER BY id DESC LIMIT $1""",
            limit,
        )
    return [ArchivePass(_utc(r[0]), _utc(r[1]), *r[2:]) for r in found]


def _utc(epoch_seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch_seconds, datetime.UTC)
