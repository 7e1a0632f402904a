"""The archiver: closed pages from Redis into the ``record`` table, exactly once.

Per partition, in one transaction per chunk of pages:

1. ``pg_try_advisory_xact_lock(hashtext(topic), partition)``: another archiver working on
   the partition makes us skip it (it is archiving it right now);
2. read ``archive_progress.archived_through`` (the next offset to archive). PostgreSQL is
   the source of truth: Redis' own archived marker only ever lags it. Offsets below
   DeleteRecords' floor are deleted, not archived: the higher of Redis' floor and
   ``partition_state.log_start`` becomes both (storage_pg.deletion.delete_below), and
   archiving goes on from there. If Redis' oldest offset is past that, retention dropped
   those records before archiving was switched on: the gap is recorded
   (storage_pg.gaps.record_gap) and archiving goes on after it;
3. fetch the closed pages holding offsets >= that from Redis, decode their batches (every
   compression) into rows and stream them with binary COPY (decoding overlaps with the
   server's inserting: rows are produced lazily while asyncpg sends them);
4. with ``replicas``, wait until that many Redis replicas have every page read (the
   barrier: a failover must not promote a replica that forgets what the archive holds;
   not met in time, the chunk is rolled back and retried next pass); then advance
   ``archive_progress`` in the same transaction, and commit (synchronously, even where
   synchronous_commit is off: the commit must outlive a crash of PostgreSQL);
5. only then tell Redis (``mark_archived``), which lets retention drop those pages.

A crash before 4 commits rolls everything back; a crash between 4 and 5 leaves Redis'
marker behind, and the next run re-reads the progress from PostgreSQL and continues after
it (and tells Redis again). So nothing is lost and nothing archived twice; the unique
(topic, partition, offset) constraint would turn any slip into an error, not a duplicate.

Before anything, archiving is switched on in Redis (Log.enable_archiving): from then on no
closed page expires or is dropped by max pages before it is archived.

After the partitions, the watermark advances: every record id <= watermark is archived (or
lies in a recorded gap). A pass that archived something or moved it is recorded in
``archive_pass`` (storage_pg/archive_passes.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import asyncpg

from kafkaesque.errors import UnknownTopic
from kafkaesque.hot.archiving import ClosedPage
from kafkaesque.hot.compaction import Compactor
from kafkaesque.hot.compaction_types import TopicCompaction
from kafkaesque.hot.log import Log
from kafkaesque.hot.outage import REDIS, REDIS_CONNECTION_ERRORS
from kafkaesque.tasks import sleep_unless_stopped
from storage_pg import archive_passes, archive_sql, group_offsets, share_state
from storage_pg.compacted import LatestKeys, catch_up
from storage_pg.deletion import delete_below, delete_topic
from storage_pg.durable_barrier import DurableBarrier
from storage_pg.gaps import advance_watermark, record_gap
from storage_pg.pool import PG_CONNECTION_ERRORS, ArchiveError, check_pool, ms_to_pg
from storage_pg.recovery import bind_cluster, recover
from storage_pg.rows import configs_json
from storage_pg.schema import ensure_schema

log = logging.getLogger(__name__)

# Errors that mean "Redis (or PostgreSQL) is not reachable right now": retry later.
CONNECTION_ERRORS = REDIS_CONNECTION_ERRORS + PG_CONNECTION_ERRORS


class _RollBack(Exception):
    """Leaves a chunk's transaction uncommitted (the barrier was not met)."""


@dataclass(slots=True)
class ArchiveSummary:
    """What one run archived (running totals while it runs)."""

    pages: int = 0
    rows: int = 0
    bytes: int = 0  # of the stored batches archived
    seconds: float = 0.0
    partitions: int = 0  # partitions something was archived from
    busy: int = 0  # partitions skipped because another archiver held them
    rejected: int = 0  # batches that could not be decoded, kept raw in rejected_batch
    watermark: int | None = None  # after the run: every record id <= this is archived
    # (or was dropped by retention before archiving, in a recorded gap)
    gaps: list[str] = field(default_factory=list)  # gaps found (and recorded) by this run
    problems: list[str] = field(default_factory=list)  # partitions left alone, and why
    compacted: list[TopicCompaction] = field(default_factory=list)  # compact topics, after


class Archiver:
    """Drains closed pages of every topic partition of ``log`` into the archive.

    ``pool`` comes from ``storage_pg.create_pool``. ``idle_close_ms``: open pages whose first
    record is older are closed first so quiet partitions drain too (None: never).
    ``pages_per_transaction``: pages per COPY/commit. ``concurrency``: partitions archived
    at once. ``recover_first``: restore Redis from the archive first if it lost its data.
    ``compact``: compact the compact topics after archiving (pages only once archived, see
    kafkaesque.hot.compaction); off where a broker beside it compacts already. ``replicas``:
    Redis replicas that must have a chunk's pages before it is committed (the broker's
    ``--min-insync-replicas`` minus one), waited for at most ``replica_timeout`` seconds.
    On a server with an AOF a chunk is also fsynced there first (storage_pg.durable_barrier).
    """

    def __init__(
        self,
        log: Log,
        pool: asyncpg.Pool,
        *,
        idle_close_ms: int | None = 60_000,
        pages_per_transaction: int = 16,
        concurrency: int = 2,
        copy_timeout: float = 600.0,
        recover_first: bool = True,
        compact: bool = True,
        replicas: int = 0,
        replica_timeout: float = 4.0,  # under redis-py's 5 s default socket timeout
    ) -> None:
        self.log = log
        self.replicas = replicas
        self.replica_timeout = replica_timeout
        self.pool = pool
        self.idle_close_ms = idle_close_ms
        self.pages_per_transaction = pages_per_transaction
        self.concurrency = concurrency
        self.copy_timeout = copy_timeout
        self.recover_first = recover_first
        self.compactor = Compactor(log) if compact else None
        self._ready = False
        # (archived_through, log start) per partition as last read from PostgreSQL: a
        # partition whose log end and floor equal them has nothing new, and needs no
        # transaction. Keyed by topic id: a name deleted and created again is another log.
        self._through: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}
        self._epochs: dict[tuple[uuid.UUID, int], int] = {}
        self.barrier = DurableBarrier(log, replicas)
        # Whether compact_key is kept for a partition, as last committed (the cleanup
        # policy may change while no record arrives).
        self._keyed: dict[tuple[uuid.UUID, int], bool] = {}

    # -- one run ----------------------------------------------------------------------
    async def run_once(
        self, progress: Callable[[ArchiveSummary], None] | None = None
    ) -> ArchiveSummary:
        """Archive every closed page of every partition, then advance the watermark.
        ``progress`` is called with the running totals after each committed chunk."""
        started = time.perf_counter()
        summary = ArchiveSummary()
        if not self._ready:
            async with self.pool.acquire() as conn:
                await check_pool(conn)
                await ensure_schema(conn)
            self._ready = True
        if self.recover_first and await self.log.needs_recovery():
            await recover(self.log, self.pool)
            self._through.clear()
            self._epochs.clear()
            self._keyed.clear()
        async with self.pool.acquire() as conn:
            await bind_cluster(self.log, conn)  # never archive one cluster into another's
        await self.log.enable_archiving()
        partitions = await self._sync_topics()
        limit = asyncio.Semaphore(self.concurrency)

        async def one(topic: str, topic_id: uuid.UUID, partition: int, compact: bool) -> None:
            async with limit:
                try:
                    await self._archive_partition(
                        topic, topic_id, partition, compact, summary, progress
                    )
                except UnknownTopic:  # deleted meanwhile
                    pass
                except asyncpg.DataError as exc:
                    # PostgreSQL refused a value of this partition's records: its pages
                    # stay in Redis, said every pass; the other partitions go on.
                    summary.problems.append(
                        f"{topic}[{partition}]: the archive refused a record "
                        f"({type(exc).__name__}: {exc}); its pages stay in Redis"
                    )

        try:
            async with asyncio.TaskGroup() as group:
                for topic, topic_id, partition, compact in partitions:
                    group.create_task(one(topic, topic_id, partition, compact))
        except BaseExceptionGroup as group_error:
            # One partition failed (the others were cancelled): raise its error itself, so
            # callers see e.g. a lost connection as such.
            raise group_error.exceptions[0] from None
        summary.watermark = watermark = await self.advance_watermark()
        await self._archive_group_offsets()
        if self.compactor is not None:  # what was just archived may now be compacted
            summary.compacted = await self.compactor.run_once()
        summary.seconds = time.perf_counter() - started
        await archive_passes.record(  # idle passes record nothing
            self.pool, summary.seconds, summary.rows, summary.bytes, watermark
        )
        for problem in summary.problems:
            log.error("archive: %s", problem)
        for gap in summary.gaps:
            log.warning("archive: %s", gap)
        return summary

    async def _archive_group_offsets(self) -> None:
        """Copy every group's committed offsets, so they survive Redis losing its data."""
        snapshot = await self.log.stores.offsets.snapshot()
        if snapshot is not None:  # None: Redis lost its data; keep what the archive has
            async with self.pool.acquire() as conn:
                await group_offsets.save(conn, snapshot)
        shares = await self.log.stores.share.snapshot()  # share groups' share-partitions
        if shares is not None:
            async with self.pool.acquire() as conn:
                await share_state.save(conn, shares)

    async def _sync_topics(self) -> list[tuple[str, uuid.UUID, int, bool]]:
        """Upsert the topic rows; return the partitions to archive (and whether their
        topic is compact). A topic deleted from
        the archive (deleted while this run started) is skipped. A topic whose Redis id
        differs from the archived one was deleted and created again under the same name
        while no archive was attached: the deleted one's records go, as the delete meant."""
        partitions = []
        async with self.pool.acquire() as conn:
            for name in await self.log.list_topics():
                try:
                    config = await self.log.topic(name)
                except UnknownTopic:
                    continue  # deleted meanwhile
                topic_id = uuid.UUID(bytes=config.topic_id)
                row = (
                    name,
                    topic_id,
                    config.partitions,
                    config.page_size,
                    config.ttl,
                    config.max_pages,
                    ms_to_pg(config.created_ms),
                    configs_json(config.configs),
                    config.replication_factor,
                )
                if await conn.fetchval(archive_sql.TOPIC, *row) is None:
                    if await conn.fetchval(archive_sql.DELETED, topic_id):
                        continue  # being deleted
                    log.warning(
                        "archive: topic %s was deleted and created again; deleting the "
                        "archived records of the deleted one",
                        name,
                    )
                    await delete_topic(conn, name, None)
                    if await conn.fetchval(archive_sql.TOPIC, *row) is None:
                        continue  # deleted again meanwhile
                partitions += [
                    (name, topic_id, p, config.compact) for p in range(config.partitions)
                ]
        return partitions

    async def _archive_partition(
        self,
        topic: str,
        topic_id: uuid.UUID,
        partition: int,
        compact: bool,
        summary: ArchiveSummary,
        progress: Callable[[ArchiveSummary], None] | None,
    ) -> None:
        key = (topic_id, partition)
        # Before the state: see _record_gap.
        counter = await self.log.sequence_counter(topic, partition)
        state = await self.log.state(topic, partition)
        if self.idle_close_ms is not None:
            await self.log.close_idle_pages(topic, partition, self.idle_close_ms)
        if self._epochs.get(key) != state.leader_epoch:
            try:
                async with self.pool.acquire() as conn, conn.transaction():
                    # Under the partition's lock, as a topic deletion holds it: else this row
                    # could land between the deletion's removal of the topic's epochs and of
                    # its topic row, and the deletion would fail on it. Another archiver
                    # holding it is archiving this partition: leave it to that one.
                    if not await conn.fetchval(archive_sql.LOCK, topic, partition):
                        summary.busy += 1
                        return
                    await conn.execute(archive_sql.EPOCH, topic, partition, state.leader_epoch)
            except asyncpg.ForeignKeyViolationError:
                return  # the topic was deleted from the archive meanwhile
            self._epochs[key] = state.leader_epoch
        unchanged = self._through.get(key) == (state.log_end, state.floor)
        if unchanged and self._keyed.get(key) == compact:
            await self.log.mark_archived(topic, partition, state.log_end)  # Redis may lag
            return  # nothing new since we archived everything
        # Only pages wholly below the last stable offset: every transaction of their
        # records has ended, so the aborted ones are known and left out, and nothing of a
        # transaction that may still abort is archived (the watermark stays below it too).
        stable = await self.log.last_stable_offset(topic, partition)
        archived_anything = False
        while True:
            pages: list[ClosedPage] = []
            try:
                async with self.pool.acquire() as conn, conn.transaction():
                    if not await conn.fetchval(archive_sql.LOCK, topic, partition):
                        summary.busy += 1
                        return
                    await conn.execute(archive_sql.DURABLE)
                    if await conn.fetchval(archive_sql.TOPIC_ID, topic) != topic_id:
                        return  # deleted from the archive since the run began
                    progress_row = await conn.fetchrow(archive_sql.PROGRESS, topic, partition)
                    through, keys_through, deleted_below = progress_row
                    await catch_up(conn, topic, partition, compact, keys_through, through)
                    if through > state.log_end:
                        state = await self.log.state(topic, partition)  # it may have grown
                        if through > state.log_end:
                            summary.problems.append(
                                f"{topic}[{partition}]: Redis ends at offset {state.log_end}, "
                                f"below the {through} already archived (Redis lost data without "
                                "recovery?); not archiving it"
                            )
                            return
                    if state.floor > deleted_below:
                        # Deleted in Redis while the archive was not told (a command without
                        # it, or a topic not archived yet): delete here too.
                        await delete_below(conn, topic, partition, state.floor)
                        deleted_below = state.floor
                    through = max(through, deleted_below)  # never archive deleted offsets
                    if through < state.log_start:
                        # Retention dropped these before archiving was switched on (it keeps
                        # every unarchived page since): record the gap and go on after it.
                        gap = await record_gap(
                            conn, self.log, topic, partition, through, state, counter
                        )
                        if gap is None:
                            return  # the topic went meanwhile
                        summary.gaps.append(gap)
                        through = state.log_start
                        await conn.execute(
                            archive_sql.ADVANCE, topic, partition, through, 0, None, compact
                        )
                    pages = await self.log.closed_pages(
                        topic, partition, through, self.pages_per_transaction
                    )
                    held = len(pages)
                    pages = list(itertools.takewhile(lambda p: p.next_offset <= stable, pages))
                    held -= len(pages)
                    if pages:
                        keys = LatestKeys() if compact else None
                        aborted = await self.log.aborted_transactions(topic, partition, through)
                        chunk = await archive_sql.copy_pages(
                            conn,
                            topic,
                            partition,
                            through,
                            pages,
                            keys,
                            timeout=self.copy_timeout,
                            aborted=aborted,
                        )
                        if keys is not None:
                            await keys.save(conn, topic, partition)
                        why = await self.barrier.holds(topic, partition, self.replica_timeout)
                        if why is not None:
                            raise _RollBack(why)
                        through = pages[-1].next_offset
                        await conn.execute(
                            archive_sql.ADVANCE,
                            topic,
                            partition,
                            through,
                            chunk.rows,
                            chunk.max_producer_id,
                            compact,
                        )
            except _RollBack as why:
                summary.problems.append(f"{topic}[{partition}]: {why}; archiving them next pass")
                return
            # committed: now Redis may let the pages go
            if deleted_below > state.floor:
                # A DeleteRecords that reached the archive but not Redis: finish it.
                await self.log.raise_floor(topic, partition, deleted_below)
                state = replace(state, floor=deleted_below)
            await self.log.mark_archived(topic, partition, through)
            self._through[key] = (through, deleted_below)
            self._keyed[key] = compact
            if not pages:
                break
            archived_anything = True
            summary.pages += len(pages)
            summary.rows += chunk.rows
            summary.bytes += chunk.bytes
            summary.rejected += len(chunk.rejected)
            if progress is not None:
                progress(summary)
            if len(pages) < self.pages_per_transaction or held:
                break
        if archived_anything:
            summary.partitions += 1

    # -- watermark --------------------------------------------------------------------
    async def advance_watermark(self) -> int:
        """Raise the watermark as far as the archive is complete (see storage_pg.gaps)."""
        return await advance_watermark(self.log, self.pool)

    # -- forever ----------------------------------------------------------------------
    async def run_forever(
        self,
        interval: float = 10.0,
        *,
        max_backoff: float = 60.0,
        stop: asyncio.Event | None = None,
    ) -> None:
        """Run every ``interval`` seconds until ``stop`` is set (or the task is cancelled).
        A failed run (PostgreSQL or Redis unreachable, ...) is logged and retried after a
        backoff doubling from one second up to ``max_backoff``; Redis keeps every
        unarchived page meanwhile (they never expire before being archived)."""
        backoff = min(1.0, max_backoff)
        while stop is None or not stop.is_set():
            try:
                summary = await self.run_once()
            except REDIS_CONNECTION_ERRORS as exc:
                delay, backoff = backoff, min(backoff * 2, max_backoff)
                REDIS.failed(exc)  # once per outage, shared with the broker's other loops
            except PG_CONNECTION_ERRORS as exc:
                delay, backoff = backoff, min(backoff * 2, max_backoff)
                log.warning(
                    "archive: cannot reach PostgreSQL (%s: %s); retrying in %.1fs",
                    type(exc).__name__,
                    exc,
                    delay,
                )
            except ArchiveError as exc:  # its message is for people: no traceback
                delay, backoff = backoff, min(backoff * 2, max_backoff)
                log.error("archive: %s; retrying in %.1fs", exc, delay)
            except Exception:
                delay, backoff = backoff, min(backoff * 2, max_backoff)
                log.exception("archive run failed; retrying in %.1fs", delay)
            else:
                REDIS.recovered()
                delay, backoff = interval, min(1.0, max_backoff)
                if summary.rows:
                    log.info(
                        "archived %d records (%d pages, %d bytes) in %.2fs; watermark %s",
                        summary.rows,
                        summary.pages,
                        summary.bytes,
                        summary.seconds,
                        summary.watermark,
                    )
                for topic in summary.compacted:
                    if topic.compacted:
                        log.info("compaction: %s", topic.format())
            await sleep_unless_stopped(delay, stop)
