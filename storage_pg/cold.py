"""Cold reads: offsets Redis no longer holds, served from the archive (tiered storage).

``ArchiveReader`` implements kafkaesque.hot.log_types.ColdStore: it selects the partition's
rows from the requested offset on (an index range scan of the unique (topic, partition,
offset) index, already in offset order) and re-encodes them as uncompressed RecordBatch v2
batches. A batch holds a run of contiguous offsets from one producer (id and epoch) whose
sequence numbers follow each other, so idempotence metadata stays truthful; a gap (a batch
that was never archived) starts a new batch. Timestamps, keys (null and empty differ),
values and headers come back as produced; compression does not (batches are rebuilt).

A compact topic's partition is read compacted up to ``archive_progress.keys_through``
(storage_pg.compacted): only the latest record of each key, in batches whose offsets have
gaps as a compacted Kafka log's do.

Also ``watermark`` and ``status`` for ``kafkaesque archive --status``.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import asyncpg

from kafkaesque.records.build import build_batch
from storage_pg.compacted import KEYS_THROUGH, SELECT_LATEST
from storage_pg.pool import PG_EPOCH_MS, ms_to_pg, pg_to_datetime, pg_to_ms
from storage_pg.rows import NO_HEADERS, header_key

_SELECT = """
    SELECT "offset", "timestamp", key, value, headers, producer_id, producer_epoch,
           producer_sequence
    FROM record
    WHERE topic = $1 AND partition = $2 AND "offset" >= $3
    ORDER BY "offset"
    LIMIT $4
"""
_START = 'SELECT min("offset") FROM record WHERE topic = $1 AND partition = $2'
_THROUGH = "SELECT archived_through FROM archive_progress WHERE topic = $1 AND partition = $2"
# No index on timestamp (it would cost on every COPY): the partition's offset index range
# is scanned in order and the scan stops at the first match.
_FIND_TIME = """
    SELECT "offset", "timestamp" FROM record
    WHERE topic = $1 AND partition = $2 AND "offset" < $3 AND "timestamp" >= $4
    ORDER BY "offset"
    LIMIT 1
"""
# pg_column_size of the whole row: what its columns take in the heap and TOAST, after
# PostgreSQL's compression; a scan of the topic's range of the unique index.
_PARTITION_BYTES = """
    SELECT partition, sum(pg_column_size(r.*))::bigint AS bytes
    FROM record r
    WHERE topic = $1
    GROUP BY partition
"""
_SEQUENCE_MASK = 0x7FFFFFFF
_MAX_DELTA = 0x7FFFFFFF  # a batch's offset deltas are int32
_BATCH_OVERHEAD = 61  # the batch header
_RECORD_OVERHEAD = 12  # a record's length, attributes, deltas and sizes, roughly, at most


class ArchiveReader:
    """Reads archived records back as record batches (kafkaesque.hot.log_types.ColdStore).

    ``pool`` comes from ``storage_pg.create_pool``. ``max_records``: rows fetched per
    query; ``batch_records``: records per rebuilt batch at most."""

    def __init__(
        self, pool: asyncpg.Pool, *, max_records: int = 20_000, batch_records: int = 4096
    ) -> None:
        self.pool = pool
        self.max_records = max_records
        self.batch_records = batch_records
        self._record_size = 128.0  # running estimate, to size the row limit from max_bytes

    async def start_offset(self, topic: str, partition: int) -> int | None:
        async with self.pool.acquire() as conn:
            try:
                return await conn.fetchval(_START, topic, partition)
            except asyncpg.UndefinedTableError:
                return None  # no archive yet

    async def archived_through(self, topic: str, partition: int) -> int:
        """The partition's next offset to archive: each one below it is archived, or was
        aborted, deleted or dropped in a recorded gap; 0 where nothing is archived."""
        async with self.pool.acquire() as conn:
            try:
                return await conn.fetchval(_THROUGH, topic, partition) or 0
            except asyncpg.UndefinedTableError:
                return 0  # no archive yet

    async def watermark(self) -> int:
        """The record id up to which everything is archived (0: nothing, or no archive)."""
        return await watermark(self.pool)

    async def dropped_ranges(self, topic: str) -> list[tuple[int, int, int]]:
        """(partition, first offset, last offset) of the topic's gaps: offsets retention
        dropped before archiving."""
        async with self.pool.acquire() as conn:
            try:
                gaps = await dropped_ranges(conn, topic)
            except asyncpg.UndefinedTableError:
                return []  # no archive (or one from before gaps were recorded)
        return [(g.partition, g.first_offset, g.last_offset) for g in gaps]

    async def partition_bytes(self, topic: str) -> dict[int, int]:
        """partition -> bytes of its archived rows (DescribeLogDirs' archive size)."""
        async with self.pool.acquire() as conn:
            try:
                rows = await conn.fetch(_PARTITION_BYTES, topic)
            except asyncpg.UndefinedTableError:
                return {}  # no archive yet
        return {r["partition"]: r["bytes"] for r in rows}

    async def find_time(
        self, topic: str, partition: int, timestamp: int, below: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first archived record below offset ``below`` whose
        timestamp is at or after ``timestamp`` (ms), None if there is none."""
        target = ms_to_pg(timestamp)
        if target is None:
            return None  # beyond every timestamp the archive can hold
        async with self.pool.acquire() as conn:
            try:
                row = await conn.fetchrow(_FIND_TIME, topic, partition, below, target)
            except asyncpg.UndefinedTableError:
                return None  # no archive yet
        return None if row is None else (row["offset"], pg_to_ms(row["timestamp"]))

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> list[bytes]:
        """Batches from ``offset`` on (the next archived offset if that one is missing):
        the first always, more while the total stays within ``max_bytes``. [] when nothing
        at or after ``offset`` is archived."""
        try:
            return await self._read(topic, partition, offset, max_bytes)
        except asyncpg.UndefinedTableError:
            return []  # no archive yet

    async def _read(self, topic: str, partition: int, offset: int, max_bytes: int) -> list[bytes]:
        batches: list[bytes] = []
        total = 0
        async with self.pool.acquire() as conn:
            keys_through = await _keys_through(conn, topic, partition)
            for _ in range(16):  # bounded: each round fetches at least one more record
                budget = max(max_bytes - total, 0)
                limit = min(self.max_records, int(budget / self._record_size) + 1)
                if batches and not budget:
                    break
                compacted = keys_through is not None and offset < keys_through
                if compacted:
                    rows = await conn.fetch(
                        SELECT_LATEST, topic, partition, offset, limit, keys_through
                    )
                else:
                    rows = await conn.fetch(_SELECT, topic, partition, offset, limit)
                if rows:
                    built, used, consumed = self._encode(
                        rows, budget, first=not batches, gaps=compacted
                    )
                    batches += built
                    total += sum(map(len, built))
                    if used:
                        self._record_size = 0.8 * self._record_size + 0.2 * (used / consumed)
                    if consumed < len(rows):
                        break  # out of budget
                if len(rows) < limit:
                    if not compacted:
                        break  # the archive has no more
                    offset = keys_through  # type: ignore[assignment]  # on past the view
                else:
                    offset = rows[-1][0] + 1
        return batches

    def _encode(
        self, rows: list[asyncpg.Record], budget: int, first: bool, gaps: bool = False
    ) -> tuple[list[bytes], int, int]:
        """Batches of the rows within ``budget`` bytes (estimated; with ``first``, at least
        one record); returns them, their estimated size and the rows used. With ``gaps``
        (a compacted view) a batch may skip offsets, as a compacted batch does."""
        out: list[bytes] = []
        used = 0
        i, n = 0, len(rows)
        while i < n:
            row = rows[i]
            base, pid, epoch, seq = row[0], row[5], row[6], row[7]
            size = _BATCH_OVERHEAD
            j = i
            while j < n and j - i < self.batch_records:
                r = rows[j]
                k = r[0] - base  # the offset delta
                if (k != j - i and not gaps) or k > _MAX_DELTA or r[5] != pid or r[6] != epoch:
                    break
                if seq is not None and r[7] != (seq + k) & _SEQUENCE_MASK:
                    break
                key, value = r[2], r[3]
                est = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
                if r[4] != NO_HEADERS:
                    est += len(r[4])
                if used + size + est > budget and not (first and not out and j == i):
                    break
                size += est
                j += 1
            if j == i:
                break
            out.append(_build(rows[i:j], pid, epoch, seq, gaps))
            used += size
            i = j
        return out, used, i


def _build(
    rows: list[asyncpg.Record], pid: int | None, epoch: int | None, seq: int | None, gaps: bool
) -> bytes:
    values = [r[3] for r in rows]
    keys = [r[2] for r in rows]
    times = [r[1] for r in rows]
    headers = [r[4] for r in rows]
    n = len(rows)
    producer = {
        "base_offset": rows[0][0],
        "producer_id": -1 if pid is None else pid,
        "producer_epoch": -1 if epoch is None else epoch,
        "base_sequence": -1 if seq is None else seq,
    }
    if gaps:
        producer["offset_deltas"] = [r[0] - rows[0][0] for r in rows]
    if times.count(times[0]) == n:
        stamp = _ms(times[0])
        if keys.count(None) == n and headers.count(NO_HEADERS) == n:
            return build_batch(values, timestamp=stamp, **producer)
        stamps = None
    else:
        stamp, stamps = None, [_ms(t) for t in times]
    return build_batch(
        values,
        None if keys.count(None) == n else keys,
        timestamp=stamp,
        timestamps=stamps,
        headers=None if headers.count(NO_HEADERS) == n else [_headers(h) for h in headers],
        **producer,
    )


async def _keys_through(conn: asyncpg.Connection, topic: str, partition: int) -> int | None:
    """Where the partition's compacted view ends; None: not a compact topic."""
    try:
        return await conn.fetchval(KEYS_THROUGH, topic, partition)
    except asyncpg.UndefinedColumnError:
        return None  # an archive from before compaction (the archiver migrates it)


def _ms(value: tuple[int] | None) -> int:
    return -1 if value is None else value[0] // 1000 + PG_EPOCH_MS


def _headers(text: str) -> list[tuple[str, bytes | None]]:
    if text == NO_HEADERS:
        return []
    return [
        (header_key(k), None if v is None else base64.b64decode(v)) for k, v in json.loads(text)
    ]


# --- status ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    topic: str
    partition: int
    archived_through: int  # the next offset to archive
    records: int  # rows archived
    leader_epoch: int
    updated: datetime.datetime | None  # last archiving transaction


@dataclass(frozen=True, slots=True)
class DroppedRange:
    """A gap: offsets retention dropped from Redis before an archive held them."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    first_id: int  # the dropped records' ids all lie in first_id..last_id
    last_id: int

    def row(self, span: Callable[[int, int], str]) -> list[object]:
        """The gap as the CLI and the console list it: topic, partition, its offsets and
        its record ids, each range as ``span`` (first, last) writes it."""
        return [
            self.topic,
            self.partition,
            span(self.first_offset, self.last_offset),
            span(self.first_id, self.last_id),
        ]


@dataclass(frozen=True, slots=True)
class LostRange:
    """Ids above the watermark when Redis lost its data: those not archived were lost."""

    first_id: int
    last_id: int
    recovered: datetime.datetime | None


@dataclass(frozen=True, slots=True)
class ArchiveStatus:
    schema_version: int  # 0: the database holds no archive yet
    watermark: int  # every record id <= this is archived, or in a dropped or lost range
    watermark_updated: datetime.datetime | None
    partitions: list[PartitionStatus]
    rejected_batches: int  # batches kept raw because they could not be decoded
    dropped: list[DroppedRange] = field(default_factory=list)
    lost: list[LostRange] = field(default_factory=list)


async def watermark(pool: asyncpg.Pool) -> int:
    """Every record id up to this one is archived (0 when nothing is, or no archive yet)."""
    async with pool.acquire() as conn:
        if await conn.fetchval("SELECT to_regclass('archive_watermark')") is None:
            return 0
        return await conn.fetchval("SELECT id FROM archive_watermark")


@dataclass(frozen=True, slots=True)
class DatabaseUse:
    """The archive database's headroom: its size and its connections in use."""

    size: int  # bytes (pg_database_size)
    connections: int  # client connections to the server (any database's)
    max_connections: int


async def database_use(pool: asyncpg.Pool) -> DatabaseUse:
    """How big the archive's database is, and how many of the server's connections are used."""
    async with pool.acquire() as conn:
        size = await conn.fetchval("SELECT pg_database_size(current_database())")
        # background workers do not count against max_connections: client backends only
        used = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
        )
        most = int(await conn.fetchval("SHOW max_connections"))
    return DatabaseUse(size, used, most)


async def status(pool: asyncpg.Pool) -> ArchiveStatus:
    """Per partition: archived-through offset, rows, epoch; and the watermark."""
    async with pool.acquire() as conn:
        if await conn.fetchval("SELECT to_regclass('schema_version')") is None:
            return ArchiveStatus(0, 0, None, [], 0)
        version = await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_version")
        if version < 1:
            return ArchiveStatus(version, 0, None, [], 0)
        mark = await conn.fetchrow("SELECT id, updated FROM archive_watermark")
        rows = await conn.fetch(
            """SELECT topic, partition, coalesce(a.archived_through, 0) AS archived_through,
                      coalesce(a.records, 0) AS records, coalesce(s.leader_epoch, 0) AS epoch,
                      a.updated
               FROM partition_state s FULL JOIN archive_progress a USING (topic, partition)
               ORDER BY topic, partition"""
        )
        rejected = await conn.fetchval("SELECT count(*) FROM rejected_batch")
        dropped = await dropped_ranges(conn) if version >= 3 else []
        lost = (
            [
                LostRange(r[0], r[1], _datetime(r[2]))
                for r in await conn.fetch(
                    "SELECT first_id, last_id, recovered FROM lost_range ORDER BY first_id"
                )
            ]
            if version >= 5
            else []
        )
    partitions = [
        PartitionStatus(
            r["topic"],
            r["partition"],
            r["archived_through"],
            r["records"],
            r["epoch"],
            _datetime(r["updated"]),
        )
        for r in rows
    ]
    return ArchiveStatus(
        version, mark["id"], _datetime(mark["updated"]), partitions, rejected, dropped, lost
    )


async def dropped_ranges(
    conn: asyncpg.Connection, topic: str | None = None, ids: tuple[int, int] | None = None
) -> list[DroppedRange]:
    """The gaps, of ``topic`` or of every topic, by topic, partition and offset; with
    ``ids`` (low, high), only those whose id range meets low..high."""
    rows = await conn.fetch(
        """SELECT topic, partition, first_offset, last_offset, first_id, last_id
           FROM dropped_range
           WHERE ($1::text IS NULL OR topic = $1)
             AND ($2::bigint IS NULL OR (last_id >= $2 AND first_id <= $3))
           ORDER BY topic, partition, first_offset""",
        topic,
        None if ids is None else ids[0],
        None if ids is None else ids[1],
    )
    return [DroppedRange(*r) for r in rows]


def _datetime(value: object) -> datetime.datetime | None:
    """A timestamptz from a pool with or without the archive's codec."""
    if value is None or isinstance(value, datetime.datetime):
        return value
    return pg_to_datetime(value)  # type: ignore[arg-type]
