"""The archiver's SQL: its statements, and the COPY of a chunk of closed pages into ``record``."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain

import asyncpg

from kafkaesque.hot.archiving import ClosedPage
from kafkaesque.records.batch import is_aborted, is_control, read_header
from kafkaesque.records.body import InvalidRecord
from storage_pg.compacted import LatestKeys
from storage_pg.rows import COLUMNS, Row, batch_rows

# The archiver's logger: what it logs of a chunk is the archiver's to say.
log = logging.getLogger("storage_pg.archiver")

LOCK = "SELECT pg_try_advisory_xact_lock(hashtext($1), $2)"
LOCK_WAIT = "SELECT pg_advisory_xact_lock(hashtext($1), $2)"  # the same lock, waited for
# Redis drops the pages once this transaction has committed, so the commit must be
# durable when it returns. With synchronous_commit off (a default some servers or
# databases set for speed) a crash of PostgreSQL takes back the last commits, and their
# records would be nowhere. Settings that wait for more (on, remote_*) stay.
DURABLE = """
    SELECT set_config('synchronous_commit', 'local', true)
    WHERE current_setting('synchronous_commit') = 'off'
"""
# The next offset to archive, how far compact_key covers, and the log start DeleteRecords
# moved.
PROGRESS = """
    SELECT coalesce((SELECT archived_through FROM archive_progress
                     WHERE topic = $1 AND partition = $2), 0),
           (SELECT keys_through FROM archive_progress WHERE topic = $1 AND partition = $2),
           coalesce((SELECT log_start FROM partition_state
                     WHERE topic = $1 AND partition = $2), 0)
"""
# $6: the topic is compact, and compact_key covers what this transaction archived.
ADVANCE = """
    INSERT INTO archive_progress AS a (topic, partition, archived_through, records,
                                       max_producer_id, keys_through, updated)
    VALUES ($1, $2, $3, $4, $5, CASE WHEN $6::boolean THEN $3::bigint END, now())
    ON CONFLICT (topic, partition) DO UPDATE SET
        archived_through = EXCLUDED.archived_through,
        records = a.records + EXCLUDED.records,
        max_producer_id = GREATEST(a.max_producer_id, EXCLUDED.max_producer_id),
        keys_through = EXCLUDED.keys_through,
        updated = now()
"""
REJECT = """
    INSERT INTO rejected_batch (topic, partition, base_offset, first_id, record_count,
                                batch, error)
    VALUES ($1, $2, $3, $4, $5, $6, $7)
"""
TOPIC = """
    INSERT INTO topic AS t (name, topic_id, partitions, page_size, ttl, max_pages, created,
                            configs, replication_factor)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9
    WHERE NOT EXISTS (SELECT FROM deleted_topic WHERE topic_id = $2)
    ON CONFLICT (name) DO UPDATE SET
        partitions = GREATEST(t.partitions, EXCLUDED.partitions),
        page_size = EXCLUDED.page_size, ttl = EXCLUDED.ttl, max_pages = EXCLUDED.max_pages,
        configs = EXCLUDED.configs, replication_factor = EXCLUDED.replication_factor
    WHERE t.topic_id = EXCLUDED.topic_id
    RETURNING topic_id
"""
DELETED = "SELECT EXISTS (SELECT FROM deleted_topic WHERE topic_id = $1)"
TOPIC_ID = "SELECT topic_id FROM topic WHERE name = $1"
EPOCH = """
    INSERT INTO partition_state AS s (topic, partition, leader_epoch) VALUES ($1, $2, $3)
    ON CONFLICT (topic, partition) DO UPDATE
        SET leader_epoch = EXCLUDED.leader_epoch, updated = now()
        WHERE s.leader_epoch < EXCLUDED.leader_epoch
"""


# A batch kept raw: base offset, first id, record count, the batch, why. Named out here:
# inside Chunk, ``bytes`` is its field, not the type.
Rejected = tuple[int, int, int, bytes, str]


@dataclass(slots=True)
class Chunk:
    """What one COPY archived, and the batches it kept raw."""

    rows: int = 0
    bytes: int = 0
    max_producer_id: int | None = None
    rejected: list[Rejected] = field(default_factory=list)


async def copy_pages(
    conn: asyncpg.Connection,
    topic: str,
    partition: int,
    from_offset: int,
    pages: list[ClosedPage],
    keys: LatestKeys | None = None,
    *,
    timeout: float,
    aborted: Sequence[tuple[int, int, int]] = (),
) -> Chunk:
    """COPY the pages' records at offsets >= from_offset; keep undecodable batches raw.
    ``keys`` notes the latest offset of each key on the way (compact topics). Transaction
    markers and the records of the ``aborted`` transactions (producer id, first offset,
    ABORT marker's offset) are left out: the archive holds what a read_committed consumer
    reads."""
    chunk = Chunk()

    def rows() -> Iterator[list[Row]]:
        for page in pages:
            for batch, first_id in zip(page.batches, page.sequences, strict=True):
                if page.first_offset < from_offset:
                    header = read_header(batch)
                    if header.base_offset + header.last_offset_delta < from_offset:
                        continue  # archived before
                if is_control(batch) or is_aborted(batch, aborted):
                    _note_producer(chunk, read_header(batch).producer_id)
                    continue
                try:
                    header, batch_rows_ = batch_rows(
                        batch, first_id, topic, partition, from_offset, page.id_step
                    )
                except InvalidRecord as exc:
                    _reject(chunk, batch, first_id, exc)
                    continue
                chunk.rows += len(batch_rows_)
                chunk.bytes += len(batch)
                pid = header.producer_id
                if pid >= 0 and (chunk.max_producer_id is None or pid > chunk.max_producer_id):
                    chunk.max_producer_id = pid
                yield batch_rows_

    batches = rows() if keys is None else keys.passing(rows())
    await conn.copy_records_to_table(
        "record",
        records=chain.from_iterable(batches),
        columns=COLUMNS,
        timeout=timeout,
    )
    for base_offset, first_id, count, batch, error in chunk.rejected:
        log.error(
            "archive: %s[%d] batch at offset %d cannot be decoded (%s); kept raw",
            topic,
            partition,
            base_offset,
            error,
        )
        await conn.execute(REJECT, topic, partition, base_offset, first_id, count, batch, error)
    return chunk


def _note_producer(chunk: Chunk, pid: int) -> None:
    """The highest producer id archived (a restore hands out ids above it)."""
    if pid >= 0 and (chunk.max_producer_id is None or pid > chunk.max_producer_id):
        chunk.max_producer_id = pid


def _reject(chunk: Chunk, batch: bytes, first_id: int, exc: Exception) -> None:
    try:
        header = read_header(batch)
        base_offset, count = header.base_offset, header.record_count
    except InvalidRecord:
        base_offset, count = -1, 0
    # The message may quote what the client sent; a text column takes no NUL.
    chunk.rejected.append((base_offset, first_id, count, batch, str(exc).replace("\0", "\\0")))
    chunk.bytes += len(batch)
