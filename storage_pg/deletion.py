"""Deleting from the archive: a topic with its data, or a partition's records below an
offset (DeleteRecords).

A topic: one transaction per delete. It first takes the archiver's per-partition advisory
locks (waiting for a chunk being archived to commit), then removes the topic's records,
rejected batches, progress, epochs, dropped ranges, compacted keys and topic row, and leaves a
``deleted_topic`` row per deleted incarnation (topic id): an archiver that listed the topic
before the delete skips it, and a restore of Redis keeps its ids as floors.

Records: one transaction under the partition's advisory lock raises
``partition_state.log_start`` (a restore gives it back to Redis as the floor) and
``archive_progress.archived_through`` to the offset (the archiver goes on from there: the
offsets below are accounted for, not a gap), and deletes the rows, rejected batches and
compacted keys below it. Dropped ranges stay: they bound the ids of later gaps and of a restore.
"""

from __future__ import annotations

import logging
import uuid

import asyncpg

from storage_pg.archive_sql import LOCK_WAIT, TOPIC_ID
from storage_pg.schema import ensure_schema

log = logging.getLogger(__name__)

_ARCHIVED = "SELECT topic_id, partitions FROM topic WHERE name = $1"
_DROP_RECORDS = """
    WITH gone AS (DELETE FROM record WHERE topic = $1 RETURNING id)
    SELECT count(*) AS records, coalesce(max(id), 0) AS max_id FROM gone
"""
_DROP_REJECTED = """
    WITH gone AS (DELETE FROM rejected_batch WHERE topic = $1
                  RETURNING first_id + record_count - 1 AS last_id)
    SELECT coalesce(max(last_id), 0) FROM gone
"""
_DROP_PROGRESS = """
    WITH gone AS (DELETE FROM archive_progress WHERE topic = $1 RETURNING max_producer_id)
    SELECT max(max_producer_id) FROM gone
"""
_RAISE_LOG_START = """
    INSERT INTO partition_state AS s (topic, partition, log_start) VALUES ($1, $2, $3)
    ON CONFLICT (topic, partition) DO UPDATE
        SET log_start = EXCLUDED.log_start, updated = now()
        WHERE s.log_start < EXCLUDED.log_start
"""
_RAISE_PROGRESS = """
    INSERT INTO archive_progress AS a (topic, partition, archived_through) VALUES ($1, $2, $3)
    ON CONFLICT (topic, partition) DO UPDATE
        SET archived_through = EXCLUDED.archived_through, updated = now()
        WHERE a.archived_through < EXCLUDED.archived_through
"""
_DELETE_BELOW = 'DELETE FROM record WHERE topic = $1 AND partition = $2 AND "offset" < $3'
# Rejected batches wholly below: one across the offset still holds offsets of the log.
_DELETE_KEYS_BELOW = """
    DELETE FROM compact_key WHERE topic = $1 AND partition = $2 AND "offset" < $3
"""
_DELETE_REJECTED_BELOW = """
    DELETE FROM rejected_batch
    WHERE topic = $1 AND partition = $2 AND base_offset + record_count <= $3
"""
_TOMBSTONE = """
    INSERT INTO deleted_topic (topic_id, name, records, max_id, max_producer_id)
    VALUES ($1, $2, $3, $4, $5) ON CONFLICT (topic_id) DO NOTHING
"""


async def delete_topic(
    conn: asyncpg.Connection, name: str, topic_id: uuid.UUID | None, partitions: int = 0
) -> bool:
    """Delete topic ``name`` from the archive: the incarnation archived under that name and,
    if given, ``topic_id`` (the one in Redis, with ``partitions``), which is then never
    archived. Returns whether the archive had the topic."""
    await ensure_schema(conn)
    async with conn.transaction():
        archived = await conn.fetchrow(_ARCHIVED, name)
        if archived is not None:
            partitions = max(partitions, archived["partitions"])
        for partition in range(partitions):
            await conn.execute(LOCK_WAIT, name, partition)
        archived = await conn.fetchrow(_ARCHIVED + " FOR UPDATE", name)
        records, max_id = await conn.fetchrow(_DROP_RECORDS, name)
        max_id = max(max_id, await conn.fetchval(_DROP_REJECTED, name))
        max_producer_id = await conn.fetchval(_DROP_PROGRESS, name)
        await conn.execute("DELETE FROM partition_state WHERE topic = $1", name)
        await conn.execute("DELETE FROM dropped_range WHERE topic = $1", name)
        await conn.execute("DELETE FROM compact_key WHERE topic = $1", name)
        await conn.execute("DELETE FROM topic WHERE name = $1", name)
        if archived is not None:
            archived_id = uuid.UUID(str(archived["topic_id"]))
            await conn.execute(_TOMBSTONE, archived_id, name, records, max_id, max_producer_id)
        if topic_id is not None and (archived is None or topic_id != archived_id):
            await conn.execute(_TOMBSTONE, topic_id, name, 0, max_id, max_producer_id)
    if records:
        log.info("deleted %d archived records of topic %s", records, name)
    return archived is not None


async def delete_records(
    conn: asyncpg.Connection, topic: str, topic_id: uuid.UUID, partition: int, before: int
) -> int:
    """Delete the partition's records below offset ``before`` for good (DeleteRecords),
    waiting for an archiver working on the partition; returns how many rows went. Nothing
    happens when the archive does not hold that incarnation of the topic (never archived,
    or about to be deleted as another one): its archiver takes the floor from Redis."""
    await ensure_schema(conn)
    async with conn.transaction():
        await conn.execute(LOCK_WAIT, topic, partition)
        if await conn.fetchval(TOPIC_ID, topic) != topic_id:
            return 0
        return await delete_below(conn, topic, partition, before)


async def delete_below(conn: asyncpg.Connection, topic: str, partition: int, before: int) -> int:
    """The rows of ``delete_records``, in the caller's transaction, which holds the
    partition's advisory lock and knows the topic row exists; returns how many rows went."""
    await conn.execute(_RAISE_LOG_START, topic, partition, before)
    await conn.execute(_RAISE_PROGRESS, topic, partition, before)
    deleted = await conn.execute(_DELETE_BELOW, topic, partition, before)
    await conn.execute(_DELETE_REJECTED_BELOW, topic, partition, before)
    await conn.execute(_DELETE_KEYS_BELOW, topic, partition, before)
    rows = int(deleted.split()[-1])  # "DELETE n"
    if rows:
        log.info(
            "deleted %d archived records of %s[%d] below offset %d", rows, topic, partition, before
        )
    return rows
