"""The archive's schema: versioned migrations applied in order, once, under a lock.

``schema_version`` holds one row per applied migration. ``ensure_schema`` applies the missing
ones in a single transaction that first takes a transaction-level advisory lock, so two
processes starting at once serialise (the second finds everything applied) and a crash
half-way leaves nothing half-applied (PostgreSQL's DDL is transactional).

Design notes for the tables (migration 1):

- ``record.id`` is the global sequence number Redis assigns in produce order across all
  topics: the archive's total order and primary key.
- ``unique (topic, partition, "offset")`` is the only other index. Its b-tree serves every
  per-partition query: cold reads (``topic = $1 and partition = $2 and "offset" >= $3
  order by "offset" limit n`` is an index range scan already in order) and the lowest
  archived offset (``min("offset")``, one index probe). It also makes a duplicate archive
  of the same offset fail loudly instead of silently double-writing. No index on
  timestamp or producer: each extra index costs on every COPY, and nothing hot needs one.
- ``topic`` columns use the "C" collation: offsets are compared in the unique index on
  every insert, and byte-wise comparison is both faster and independent of the database's
  locale.
- No foreign key from ``record`` to ``topic``: it would fire a check per archived row.
- ``archive_progress`` also keeps the partition's archived row count and the highest
  producer id it saw, updated in the archiving transaction, so ``status`` and recovery
  never scan ``record``.
- ``rejected_batch`` keeps batches whose records cannot be decoded (their CRC was fine, so
  the log accepted them): they are stored raw instead of blocking their partition forever.

Migration 2: ``deleted_topic`` remembers each deleted topic incarnation (by topic id), so
an archiver that listed the topic before the delete does not archive it again, and a
restore after Redis lost its data never hands out a record or producer id the deleted
records used.

Migration 3: ``dropped_range`` records each gap: offsets of a partition that retention
dropped from Redis before an archive held them (archiving was not on yet), with the range
their record ids lie in. The watermark's promise is that every id up to it is archived,
lies in such a range, or belonged to a deleted topic.

Migration 4: ``group_offset`` keeps every consumer group's committed offsets as of the last
archiver pass, so they survive Redis losing its data (storage_pg/group_offsets.py).

Migration 6: ``topic.configs`` keeps the configs set on a topic (Kafka's names), so a
restore gives them back; ``partition_state.log_start`` the log start DeleteRecords moved.

Migration 5: ``lost_range`` records, at each recovery after Redis lost its data, the ids
above the watermark up to the highest the archive knows: those not archived were lost
with Redis, so the watermark may pass them and readers can report them.

Migration 7 (``storage_pg/compacted.py``): ``compact_key`` keeps, per partition of a compact
topic and key, the offset of its latest archived record, so cold reads of a compact topic
serve a compacted log; ``archive_progress.keys_through`` says how far it covers.

Migration 8 (``storage_pg/group_offsets.py``): ``group_offset.group_id`` and ``metadata``
become ``bytea`` (UTF-8): clients choose them, NUL included, which ``text`` cannot hold.
Other strings clients choose reach PostgreSQL only inside ``jsonb`` (header keys in
``record.headers``, config values in ``topic.configs``), where one holding NUL is kept as
``{"base64": its UTF-8}``; topic names are Kafka's legal characters only.

Migration 9 (``storage_pg/group_offsets.py``): ``group_state`` keeps each classic group's
state (generation, members, assignment) with its offsets, so a restore gives the group back
with its members, as Kafka's coordinator loads a group after a failover.

Migration 11 (``storage_pg/share_state.py``): ``share_partition_state`` keeps share groups'
share-partitions (KIP-932: start and end offsets, in-flight records), restored with them.

Migration 12 (``storage_pg/archive_passes.py``): ``archive_pass`` keeps the archiver's last
passes that archived something or moved the watermark (the newest 1,000), for the console.
"""

from __future__ import annotations

import asyncpg

from storage_pg import archive_passes, compacted, group_offsets, share_state
from storage_pg.pool import ArchiveError

# Key of the advisory lock serialising migrations (any constant; "kafkaesq" in ASCII).
_MIGRATION_LOCK = 0x6B61666B61657371

MIGRATIONS: list[str] = [
    # 1: the archive
    """
    CREATE TABLE cluster (
        id text PRIMARY KEY,
        created timestamptz NOT NULL DEFAULT now()
    );
    CREATE UNIQUE INDEX cluster_single_row ON cluster ((true));

    CREATE TABLE topic (
        name text COLLATE "C" PRIMARY KEY,
        topic_id uuid NOT NULL,
        partitions int NOT NULL CHECK (partitions > 0),
        page_size int NOT NULL,
        ttl bigint NOT NULL,
        max_pages int NOT NULL,
        created timestamptz NOT NULL
    );

    CREATE TABLE partition_state (
        topic text COLLATE "C" NOT NULL REFERENCES topic (name),
        partition int NOT NULL,
        leader_epoch int NOT NULL DEFAULT 0,
        updated timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (topic, partition)
    );

    CREATE TABLE archive_progress (
        topic text COLLATE "C" NOT NULL REFERENCES topic (name),
        partition int NOT NULL,
        archived_through bigint NOT NULL DEFAULT 0,
        records bigint NOT NULL DEFAULT 0,
        max_producer_id bigint,
        updated timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (topic, partition)
    );

    CREATE TABLE archive_watermark (
        id bigint NOT NULL,
        updated timestamptz NOT NULL DEFAULT now()
    );
    CREATE UNIQUE INDEX archive_watermark_single_row ON archive_watermark ((true));
    INSERT INTO archive_watermark (id) VALUES (0);

    CREATE TABLE record (
        id bigint PRIMARY KEY,
        topic text COLLATE "C" NOT NULL,
        partition int NOT NULL,
        "offset" bigint NOT NULL,
        "timestamp" timestamptz,
        key bytea,
        value bytea,
        headers jsonb NOT NULL DEFAULT '[]',
        producer_id bigint,
        producer_epoch smallint,
        producer_sequence int,
        archived_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT record_partition_offset UNIQUE (topic, partition, "offset")
    );
    COMMENT ON COLUMN record.id IS 'global sequence number: produce order across all topics';
    COMMENT ON COLUMN record."timestamp" IS 'CreateTime or LogAppendTime; NULL: out of range';
    COMMENT ON COLUMN record.headers IS 'list of [key, base64 value or null]';
    COMMENT ON COLUMN record.producer_id IS 'NULL for records of non-idempotent producers';

    CREATE TABLE rejected_batch (
        topic text COLLATE "C" NOT NULL,
        partition int NOT NULL,
        base_offset bigint NOT NULL,
        first_id bigint NOT NULL,
        record_count int NOT NULL,
        batch bytea NOT NULL,
        error text NOT NULL,
        archived_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (topic, partition, base_offset)
    );
    """,
    # 2: deleted topics
    """
    CREATE TABLE deleted_topic (
        topic_id uuid PRIMARY KEY,
        name text COLLATE "C" NOT NULL,
        records bigint NOT NULL,
        max_id bigint NOT NULL,
        max_producer_id bigint,
        deleted timestamptz NOT NULL DEFAULT now()
    );
    COMMENT ON TABLE deleted_topic IS
        'topics deleted with their records: never archived again; their highest record '
        'and producer ids stay floors for a restore of Redis';
    """,
    # 3: ranges retention dropped before they could be archived
    """
    CREATE TABLE dropped_range (
        topic text COLLATE "C" NOT NULL,
        partition int NOT NULL,
        first_offset bigint NOT NULL,
        last_offset bigint NOT NULL CHECK (last_offset >= first_offset),
        first_id bigint NOT NULL,
        last_id bigint NOT NULL CHECK (last_id >= first_id),
        recorded timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (topic, partition, first_offset)
    );
    COMMENT ON TABLE dropped_range IS
        'offsets retention dropped from Redis before any archive held them: a gap in the '
        'partition; their record ids all lie in first_id..last_id (which other partitions '
        'records may share)';
    """,
    # 4: committed group offsets (storage_pg/group_offsets.py)
    group_offsets.MIGRATION,
    # 5: ids of records Redis lost before they were archived
    """
    CREATE TABLE lost_range (
        first_id bigint PRIMARY KEY,
        last_id bigint NOT NULL CHECK (last_id >= first_id),
        recovered timestamptz NOT NULL DEFAULT now()
    );
    COMMENT ON TABLE lost_range IS
        'record ids above the watermark when Redis lost its data: those not archived were '
        'lost with Redis (recovery gives out the offsets again, never the archived ids)';
    """,
    # 6: topic configs, and the log start DeleteRecords moved
    """
    ALTER TABLE topic ADD COLUMN configs jsonb;
    COMMENT ON COLUMN topic.configs IS
        'the configs set on the topic (Kafka names, canonical text); page_size, ttl and '
        'max_pages are their effective values; null for a topic archived before configs';
    ALTER TABLE partition_state ADD COLUMN log_start bigint NOT NULL DEFAULT 0;
    COMMENT ON COLUMN partition_state.log_start IS
        'offsets below it were deleted (DeleteRecords): never read, never archived';
    """,
    # 7: compact topics' latest offset per key (storage_pg/compacted.py)
    compacted.MIGRATION,
    # 8: group ids and offset metadata as UTF-8 bytes (storage_pg/group_offsets.py)
    group_offsets.BYTEA_MIGRATION,
    # 9: classic groups' states, restored with their members (storage_pg/group_offsets.py)
    group_offsets.STATE_MIGRATION,
    # 10: a topic's replication factor, restored with it
    """
    ALTER TABLE topic ADD COLUMN replication_factor int NOT NULL DEFAULT 1;
    COMMENT ON COLUMN topic.replication_factor IS
        'the replicas Metadata lists per partition (every broker serves the one copy)';
    """,
    # 11: share groups' share-partitions, restored with them (storage_pg/share_state.py)
    share_state.MIGRATION,
    # 12: the archiver's recent passes, for the console (storage_pg/archive_passes.py)
    archive_passes.MIGRATION,
]

SCHEMA_VERSION = len(MIGRATIONS)


async def ensure_schema(pool: asyncpg.Pool | asyncpg.Connection) -> int:
    """Apply the migrations this database lacks; return the schema version. Idempotent and
    safe to run from several processes at once."""
    if isinstance(pool, asyncpg.Pool):
        async with pool.acquire() as conn:
            return await _migrate(conn)
    return await _migrate(pool)


async def _migrate(conn: asyncpg.Connection) -> int:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_version (
                   version int PRIMARY KEY,
                   applied timestamptz NOT NULL DEFAULT now()
               )"""
        )
        current = await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_version")
        if current > SCHEMA_VERSION:
            raise ArchiveError(
                f"the archive's schema is version {current}, newer than this kafkaesque "
                f"understands ({SCHEMA_VERSION}): upgrade kafkaesque"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            await conn.execute(MIGRATIONS[version - 1])
            await conn.execute("INSERT INTO schema_version (version) VALUES ($1)", version)
    return SCHEMA_VERSION
