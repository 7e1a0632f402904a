"""The archive watermark and its promise: every record id up to it is archived, lies in
a recorded gap (``dropped_range``: offsets retention dropped from Redis before archiving
was switched on), belonged to a deleted topic, or was deleted by DeleteRecords (below
``partition_state.log_start``: not a gap, the archiver never meets those offsets)."""

from __future__ import annotations

import asyncio

import asyncpg

from kafkaesque.errors import UnknownTopic
from kafkaesque.hot.log import Log
from kafkaesque.hot.log_types import PartitionState

_WATERMARK = "UPDATE archive_watermark SET id = $1, updated = now() WHERE id < $1"
# The id of the partition's last record before an offset that the archive accounts for
# (archived, kept raw, or in an earlier dropped range): ids grow with offsets.
_ID_BEFORE = """
    SELECT GREATEST(
        (SELECT id FROM record WHERE topic = $1 AND partition = $2 AND "offset" < $3
         ORDER BY "offset" DESC LIMIT 1),
        (SELECT max(first_id + record_count - 1) FROM rejected_batch
         WHERE topic = $1 AND partition = $2 AND base_offset < $3),
        (SELECT max(last_id) FROM dropped_range WHERE topic = $1 AND partition = $2))
"""
_DROPPED = """
    INSERT INTO dropped_range (topic, partition, first_offset, last_offset, first_id, last_id)
    VALUES ($1, $2, $3, $4, $5, $6)
"""


async def record_gap(
    conn: asyncpg.Connection,
    log: Log,
    topic: str,
    partition: int,
    through: int,
    state: PartitionState,
    counter: int,
) -> str | None:
    """Record offsets ``through`` .. log start - 1 as dropped, with the range their ids
    lie in: after the partition's last accounted-for id, before the id of the first
    record Redis holds (or up to ``counter``, read before ``state``, when Redis holds
    none: the dropped records had their ids by then). Returns a line saying so, None if
    the partition is gone."""
    if state.log_start < state.log_end:
        following = await log.sequence_at(topic, partition, state.log_start)
        if following is None:
            return None
        last_id = following - 1
    else:
        last_id = counter
    before = await conn.fetchval(_ID_BEFORE, topic, partition, through)
    first_id = min(last_id, (before or 0) + 1)
    last_offset = state.log_start - 1
    await conn.execute(_DROPPED, topic, partition, through, last_offset, first_id, last_id)
    return (
        f"{topic}[{partition}]: offsets {through}..{last_offset} were dropped by retention "
        f"before archiving (ids within {first_id}..{last_id}); recorded as a gap"
    )


async def advance_watermark(log: Log, pool: asyncpg.Pool) -> int:
    """Raise the watermark to the highest id below which nothing is unarchived.

    That is below every partition's first unarchived id (from Redis' markers, which only
    lag the archive, so it errs low, never high) and below every id an append still
    under way can get (``Log.id_floor``)."""
    lowest, partitions = await log.id_floor()
    limit = asyncio.Semaphore(16)

    async def first_unarchived(topic: str, partition: int) -> int | None:
        async with limit:
            try:
                return await log.first_unarchived_sequence(topic, partition)
            except UnknownTopic:
                return None

    tasks = [first_unarchived(name, p) for name, p in partitions]
    for first in await asyncio.gather(*tasks):
        if first is not None and first < lowest:
            lowest = first
    async with pool.acquire() as conn:
        await conn.execute(_WATERMARK, lowest - 1)
        return await conn.fetchval("SELECT id FROM archive_watermark")
