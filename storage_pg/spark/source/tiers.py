"""One planned offset range read on an executor, tier by tier.

``OffsetRange`` is what the driver plans: (topic, partition, from, until) plus what the
partition was when planned (its topic id, its leader epoch at both ends); a task
(``RangeSet``) reads several. ``read_ranges`` opens the task's connections (executors are
separate processes) and reads each range:

1. below the partition's archived mark (``archive_progress.archived_through``: every
   offset under it is archived, or was a transaction marker, an aborted or compacted
   record, or lies in a recorded gap) straight from PostgreSQL, by offset range, as
   columns: no record batch is built there and parsed again here;
2. the rest through the log (``Log.read``, read_committed by default), which serves from
   Redis and, for a page that expired since the range was planned, from the archive.

A compact topic is read through the log only: its archived part is then the compacted
view the archive serves consumers (storage_pg.compacted).

The same range gives the same rows on every replay (offsets are never reused unless
Redis loses data, which is checked), so Spark's checkpoint makes a query exactly-once.
Offsets of the range that neither tier holds are data loss (``DataLoss``, or a warning
with failOnDataLoss=false); gaps left by transaction markers, aborted records and
compaction are not. Loss is: a recorded gap (retention dropped pages before archiving,
``dropped_range``), offsets deleted by DeleteRecords since planning, the topic deleted
(or created again: another topic id), Redis losing its data (FLUSHALL: the topic is gone
from Redis) or a leader epoch that changed under the query where the new epoch starts
below the range's end (the offsets were lost and handed out again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from kafkaesque.errors import NeedsRecovery, UnknownTopic
from kafkaesque.records.batch import next_offset
from storage_pg.cold import dropped_ranges
from storage_pg.spark.source.columns import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    Columns,
    header_list,
    headers_type,
)
from storage_pg.spark.source.connect import close_log, open_log, settle_worker
from storage_pg.spark.source.options import DataLoss, SourceOptions
from storage_pg.spark.source.vectors import (
    ARCHIVED,
    ARCHIVED_WITH_HEADERS,
    archived_rows,
    log_rows,
)

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

    from kafkaesque.hot.log import Log
    from storage_pg.tiered import Archive

log = logging.getLogger("kafkaesque.spark")

# Each read is one Arrow batch handed to Spark: about 4 MiB either way.
ARCHIVE_ROWS = 32_768  # rows per query to the archive
READ_BYTES = 4 << 20  # bytes per read from Redis
_TOPIC_ID = "SELECT topic_id FROM topic WHERE name = $1"
_DELETED_BELOW = "SELECT log_start FROM partition_state WHERE topic = $1 AND partition = $2"


@dataclass(eq=False)
class OffsetRange(InputPartition):
    """One Spark task: offsets ``start``..``end``-1 of a partition, planned while it had
    ``topic_id`` and leader epoch ``epoch`` (``start_epoch`` where ``start`` was planned,
    in an earlier micro-batch, else ``epoch``). Plain values only, pickled to the
    executor."""

    topic: str
    partition: int
    start: int
    end: int
    topic_id: str  # hex
    epoch: int
    start_epoch: int

    def __post_init__(self) -> None:
        super().__init__((self.topic, self.partition, self.start, self.end))

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}[{self.partition}] {self.start}..{self.end})"

    def name(self, start: int | None = None, end: int | None = None) -> str:
        """``topic[partition] offsets a..b`` (b inclusive), as errors say it."""
        first = self.start if start is None else start
        last = (self.end if end is None else end) - 1
        return f"{self.topic}[{self.partition}] offsets {first}..{last}"


class RangeSet(InputPartition):
    """One Spark task: offset ranges read one after another, on one set of connections
    (the planner gives each task a share of every partition's archived and Redis part,
    so the cores divide both tiers' work). Plain values only, pickled to the executor."""

    def __init__(self, ranges: Sequence[OffsetRange]) -> None:
        self.ranges = tuple(ranges)
        super().__init__(tuple(r.value for r in self.ranges))

    def __repr__(self) -> str:
        return f"RangeSet({', '.join(map(repr, self.ranges))})"

    def __len__(self) -> int:
        """The offsets the task reads."""
        return sum(r.end - r.start for r in self.ranges)


def read_range(options: SourceOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The range's rows as Arrow batches (``read_ranges`` of one range)."""
    return read_ranges(options, [r])


def read_ranges(options: SourceOptions, ranges: Sequence[OffsetRange]) -> Iterator[pa.RecordBatch]:
    """The ranges' rows as Arrow batches, range after range, on one log and archive
    connection opened for them all, on a private event loop (the executor's Python
    worker has none)."""
    settle_worker()
    ranges = [r for r in ranges if r.end > r.start]
    if not ranges:
        return
    loop = asyncio.new_event_loop()
    hot, archive = open_log(options, 2)
    try:
        for r in ranges:
            batches = RangeReader(options, r, hot, archive).batches()
            try:
                while True:
                    try:
                        batch = loop.run_until_complete(batches.__anext__())
                    except StopAsyncIteration:
                        break
                    yield batch
            finally:
                loop.run_until_complete(batches.aclose())
    finally:
        loop.run_until_complete(close_log(hot, archive))
        loop.close()


class RangeReader:
    """Reads one OffsetRange (see the module's docstring) through an open log and its
    archive (None: no archive)."""

    def __init__(
        self, options: SourceOptions, r: OffsetRange, hot: Log, archive: Archive | None
    ) -> None:
        self.options = options
        self.range = r
        self.log, self.archive = hot, archive
        self.columns = Columns(r.topic, r.partition, options.include_headers)

    def lost(self, start: int, end: int, why: str) -> None:
        """Offsets start..end-1 of the range are held by neither tier."""
        message = f"data loss: {self.range.name(start, end)} {why}"
        if self.options.fail_on_data_loss:
            raise DataLoss(message + " (failOnDataLoss=false skips them)")
        log.warning("%s: skipped (failOnDataLoss=false)", message)

    async def batches(self) -> AsyncGenerator[pa.RecordBatch, None]:
        r = self.range
        pos = r.start
        hot = await self._hot_state()
        if hot is None and self._recreated:  # the archive holds the new topic's records
            self.lost(pos, r.end, self._gone_reason)
            return
        compact = hot is not None and hot[0]
        if self.archive is not None and not compact and pos < r.end:
            async for batch in self._archived(pos):
                yield batch
            pos = max(pos, min(r.end, await self.archive.archived_through(r.topic, r.partition)))
        if pos < r.end:
            if hot is None:
                self.lost(pos, r.end, self._gone_reason)
            else:
                async for batch in self._hot(pos, hot[1]):
                    yield batch

    async def _hot_state(self) -> tuple[bool, int] | None:
        """(compact topic, the offset from which the range is not to be trusted) when the
        log still has the range's partition as planned; None (and why, in
        ``_gone_reason``) when Redis no longer has it."""
        r = self.range
        self._gone_reason = ""
        self._recreated = False
        try:
            config = await self.log.topic(r.topic)
            [state] = await self.log.partition_offsets([(r.topic, r.partition)])
        except (UnknownTopic, NeedsRecovery):
            config, state = None, None
        if config is None or state is None:
            self._gone_reason = "are in neither tier: Redis no longer has the topic"
            return None
        if config.topic_id.hex() != r.topic_id:
            self._gone_reason = "belonged to a topic since deleted (the topic was created again)"
            self._recreated = True
            return None
        self.append_time = config.value("message.timestamp.type") == "LogAppendTime"
        trusted = r.end
        for epoch in {r.start_epoch, r.epoch}:
            if epoch != state[2]:  # the partition changed hands: where did that epoch end?
                _, ended = await self.log.epoch_end_offset(r.topic, r.partition, epoch)
                trusted = min(trusted, ended if ended >= 0 else r.start)
        return config.compact, trusted

    @property
    def _kind(self) -> int:
        return LOG_APPEND_TIME if getattr(self, "append_time", False) else CREATE_TIME

    async def _archived(self, pos: int) -> AsyncIterator[pa.RecordBatch]:
        """The range's rows below the partition's archived mark, from PostgreSQL."""
        r = self.range
        assert self.archive is not None
        end = min(r.end, await self.archive.archived_through(r.topic, r.partition))
        if pos >= end:
            return
        pool = await self.archive.pool()
        async with pool.acquire() as conn:
            topic_id = await conn.fetchval(_TOPIC_ID, r.topic)
            if topic_id is not None and topic_id.hex != r.topic_id:
                self.lost(pos, r.end, "belonged to a topic since deleted (another is archived)")
                return
            deleted_below = await conn.fetchval(_DELETED_BELOW, r.topic, r.partition) or 0
            if pos < deleted_below:
                self.lost(pos, min(end, deleted_below), "were deleted (DeleteRecords)")
                pos = min(end, deleted_below)
            for gap in await dropped_ranges(conn, r.topic):
                if gap.partition == r.partition and gap.first_offset < end:
                    if gap.last_offset >= pos:
                        self.lost(
                            max(pos, gap.first_offset),
                            min(end, gap.last_offset + 1),
                            "were dropped by retention before they were archived",
                        )
            query = ARCHIVED_WITH_HEADERS if self.options.include_headers else ARCHIVED
            while pos < end:
                row = await conn.fetchrow(query, r.topic, r.partition, pos, end, ARCHIVE_ROWS)
                if not row[0]:
                    break
                headers = None
                if self.options.include_headers:
                    import pyarrow as pa

                    headers = pa.array([header_list(h) for h in row[7]], headers_type())
                rows = archived_rows(row, self._kind, headers)
                yield rows.batch(r.topic, r.partition)
                pos = int(rows.offsets[-1]) + 1
                if len(rows) < ARCHIVE_ROWS:
                    break

    async def _hot(self, pos: int, trusted: int) -> AsyncIterator[pa.RecordBatch]:
        """The range from ``pos`` through the log: Redis, the archive below Redis' start."""
        r = self.range
        end = r.end
        if trusted < end:  # with failOnDataLoss=false, read what is there now
            self.lost(
                max(pos, trusted),
                end,
                "may hold other records than planned: the partition's leader epoch changed "
                f"under the query (Redis lost its data or failed over) and its offsets from "
                f"{trusted} on were handed out again",
            )
        while pos < end:
            try:
                result = await self.log.read(
                    r.topic, r.partition, pos, READ_BYTES, committed=self.options.committed
                )
            except UnknownTopic:
                self.lost(pos, end, "are in neither tier: Redis no longer has the topic")
                return
            if not result.batches:
                if result.below_start and result.log_start > pos:
                    self.lost(pos, min(end, result.log_start), "were deleted or expired")
                    pos = result.log_start
                    continue
                self.lost(pos, end, f"are in neither tier (the log ends at {result.log_end})")
                return
            if result.skipped_to is not None:
                await self._gap(pos, min(end, result.skipped_to))
            rows = log_rows(result.batches, pos, end, result.aborted, self.options.include_headers)
            if rows is not None:
                if len(rows):
                    yield rows.batch(r.topic, r.partition)
            else:  # out of the common shape: record by record
                for batch in result.batches:
                    self.columns.add_batch(batch, pos, end, result.aborted)
                if len(self.columns):
                    yield self.columns.arrow()
            pos = next_offset(result.batches[-1])

    async def _gap(self, start: int, end: int) -> None:
        """Offsets the archive skipped: loss where it recorded a gap there, else markers,
        aborted or compacted records."""
        if self.archive is None or start >= end:
            return
        for partition, first, last in await self.archive.dropped_ranges(self.range.topic):
            if partition == self.range.partition and first < end and last >= start:
                self.lost(
                    max(start, first),
                    min(end, last + 1),
                    "were dropped by retention before they were archived",
                )
