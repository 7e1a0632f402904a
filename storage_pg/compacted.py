"""The archive's compacted view of compact topics, for Kafka reads below Redis' log start.

The archive keeps every record of every topic, also of compact topics: Redis compacts a
page only once it is archived (kafkaesque.hot.compaction), so ``record`` is the full history
in the total order. A Kafka client that reads a compact topic from offsets Redis no longer
holds (tiered reads) must still get a compacted log, though: served every archived
record, it would see a value again that a tombstone deleted, once compaction has removed
the tombstone from Redis.

So for each compact topic the archiver keeps ``compact_key``: per partition and key (its
MD5, as Kafka's cleaner maps keys; keys may be larger than a b-tree entry), the offset of
the latest archived record with that key, written in the transaction that archives the
records. ``archive_progress.keys_through`` is the offset it covers up to; NULL for a topic
that is not compact, whose cold reads serve every record. A topic that becomes compact
gets its keys from the records archived before, in the archiver's next transaction.

Cold reads (storage_pg.cold) below ``keys_through`` serve only the rows ``compact_key``
points at: the latest record of each key (tombstones included, keyless records left out,
as Kafka's cleaner does), in offset order, read through the ``(topic, partition,
offset)`` index of ``compact_key``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

import asyncpg

from storage_pg.rows import Row

MIGRATION = """
    CREATE TABLE compact_key (
        topic text COLLATE "C" NOT NULL,
        partition int NOT NULL,
        key_hash bytea NOT NULL,
        "offset" bigint NOT NULL,
        PRIMARY KEY (topic, partition, key_hash)
    );
    CREATE INDEX compact_key_offset ON compact_key (topic, partition, "offset");
    COMMENT ON TABLE compact_key IS
        'compact topics: per partition and key (MD5), the offset of the latest archived '
        'record with that key; cold reads of a compact topic serve only those';
    ALTER TABLE archive_progress ADD COLUMN keys_through bigint;
    COMMENT ON COLUMN archive_progress.keys_through IS
        'compact_key covers the records below this offset; NULL: the topic is not compact';
"""

# The key's slot in a row of storage_pg.rows.COLUMNS, and the offset's.
_KEY, _OFFSET = 5, 3
_UPSERT = """
    INSERT INTO compact_key AS k (topic, partition, key_hash, "offset")
    SELECT $1, $2, h, o FROM unnest($3::bytea[], $4::bigint[]) AS u (h, o)
    ON CONFLICT (topic, partition, key_hash) DO UPDATE SET "offset" = EXCLUDED."offset"
    WHERE k."offset" < EXCLUDED."offset"
"""
# The same from rows already archived; md5() in SQL is key_hash() in Python.
_BACKFILL = """
    INSERT INTO compact_key AS k (topic, partition, key_hash, "offset")
    SELECT $1, $2, decode(md5(key), 'hex'), max("offset") FROM record
    WHERE topic = $1 AND partition = $2 AND key IS NOT NULL
      AND "offset" >= $3 AND "offset" < $4
    GROUP BY 3
    ON CONFLICT (topic, partition, key_hash) DO UPDATE SET "offset" = EXCLUDED."offset"
    WHERE k."offset" < EXCLUDED."offset"
"""
_KEYS_THROUGH = "UPDATE archive_progress SET keys_through = $3 WHERE topic = $1 AND partition = $2"
_FORGET = "DELETE FROM compact_key WHERE topic = $1 AND partition = $2"

# The latest record of each key at offsets from $3 up to $5 (keys_through), in offset order.
SELECT_LATEST = """
    SELECT r."offset", r."timestamp", r.key, r.value, r.headers, r.producer_id,
           r.producer_epoch, r.producer_sequence
    FROM compact_key k
    JOIN record r ON r.topic = k.topic AND r.partition = k.partition AND r."offset" = k."offset"
    WHERE k.topic = $1 AND k.partition = $2 AND k."offset" >= $3 AND k."offset" < $5
    ORDER BY k."offset"
    LIMIT $4
"""
KEYS_THROUGH = "SELECT keys_through FROM archive_progress WHERE topic = $1 AND partition = $2"


def key_hash(key: bytes) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()


class LatestKeys:
    """The latest offset of each key among rows on their way into ``record``."""

    def __init__(self) -> None:
        self.offsets: dict[bytes, int] = {}

    def passing(self, batches: Iterable[list[Row]]) -> Iterator[list[Row]]:
        """``batches`` unchanged, their keys noted on the way (rows come in offset order)."""
        offsets = self.offsets
        for rows in batches:
            for row in rows:
                key = row[_KEY]
                if key is not None:
                    offsets[key_hash(key)] = row[_OFFSET]  # type: ignore[arg-type,assignment]
            yield rows

    async def save(self, conn: asyncpg.Connection, topic: str, partition: int) -> None:
        if self.offsets:
            hashes, offsets = zip(*self.offsets.items(), strict=True)
            await conn.execute(_UPSERT, topic, partition, list(hashes), list(offsets))


async def catch_up(
    conn: asyncpg.Connection,
    topic: str,
    partition: int,
    compact: bool,
    keys_through: int | None,
    through: int,
) -> None:
    """In the archiving transaction, before new rows: bring a compact partition's keys up
    to ``through`` (the records archived while it was not compact), or stop keeping them
    for a partition that is no longer compact."""
    if compact and (keys_through is None or keys_through < through):
        await conn.execute(_BACKFILL, topic, partition, keys_through or 0, through)
        await conn.execute(_KEYS_THROUGH, topic, partition, through)
    elif not compact and keys_through is not None:
        await conn.execute(_FORGET, topic, partition)
        await conn.execute(_KEYS_THROUGH, topic, partition, None)
