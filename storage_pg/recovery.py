"""Recovery: give Redis back its topics and offsets from the archive after it lost its data.

When Redis comes back empty (a flush, or a restart without persistence), every topic and
partition the archive knows is recreated at the offset where the archive ends, with a
higher leader epoch so Kafka clients see the truncation (KIP-320) instead of reusing
offsets silently; the global sequence and producer id counters are raised past everything
the archive holds, so new records get fresh ids and idempotent producers fresh ids.
Consumer groups get their archived committed offsets back as committed, leader epochs
included, even past the restored log end, so their consumers see the truncation too.
"""

from __future__ import annotations

import logging
import uuid

import asyncpg

from kafkaesque.clock import now_ms as clock_ms
from kafkaesque.config.topic_config import TopicConfig, legacy_configs
from kafkaesque.hot.log import Log
from kafkaesque.hot.log_types import RestoredPartition, RestoredTopic
from storage_pg import group_offsets, share_state
from storage_pg.pool import PG_EPOCH_MS, ArchiveError, check_pool
from storage_pg.rows import configs_from_json
from storage_pg.schema import ensure_schema

logger = logging.getLogger(__name__)


class ClusterMismatch(ArchiveError):
    """A Redis and an archive of different clusters: joining them would mix two logs."""


async def bind_cluster(log: Log, conn: asyncpg.Connection) -> None:
    """Check that Redis and the archive belong to one cluster, and record the pairing.

    Redis holding no data yet (new, or it lost its data) becomes the archive's: it takes
    the archive's cluster id now, and recovery gives it the archive's topics. Otherwise
    both must carry the same id (an archive that has none, or was never written to, takes
    Redis' id); a mismatch raises ClusterMismatch rather than restore one log into the
    other or archive one into the other."""
    if await conn.fetchval("SELECT to_regclass('cluster')") is None:
        return  # not an archive yet: the archiver's first run creates it, then binds
    archived = await conn.fetchval("SELECT id FROM cluster")
    if await log.needs_recovery():
        if archived is not None:
            await log.stores.set_cluster_id(archived)
        return
    current = await log.stores.cluster_id()
    if archived is None:
        await conn.execute("INSERT INTO cluster (id) VALUES ($1) ON CONFLICT DO NOTHING", current)
        archived = await conn.fetchval("SELECT id FROM cluster")
    if archived != current:
        raise ClusterMismatch(
            f"Redis (cluster {current}) and the archive (cluster {archived}) belong to "
            "different clusters; refusing to join them: give the --pg-dsn of this Redis' "
            "archive, or the --redis-url of this archive's Redis"
        )


_EPOCH = """
    INSERT INTO partition_state AS s (topic, partition, leader_epoch) VALUES ($1, $2, $3)
    ON CONFLICT (topic, partition) DO UPDATE
        SET leader_epoch = EXCLUDED.leader_epoch, updated = now()
        WHERE s.leader_epoch < EXCLUDED.leader_epoch
"""


# A restore's leader epochs start above the minutes since this instant. After the
# archiver's last pass Redis may have raised a partition's epoch (a leader move, a
# failover) and consumers may have read the lost records under it: the archive cannot
# know how far it went. An epoch moves by one per leader change, and a partition does not
# change leader every minute, so the minutes passed are above any epoch it reached since
# the last restore (which started it at the minutes of its own time).
RESTORE_EPOCH_BASE_MS = 1_577_836_800_000  # 2020-01-01T00:00:00Z


def restore_epoch_floor(now_ms: int) -> int:
    """The epoch a restore at ``now_ms`` at least starts each partition above."""
    return max(0, (now_ms - RESTORE_EPOCH_BASE_MS) // 60_000)


async def restored_topics(conn: asyncpg.Connection) -> list[RestoredTopic]:
    """Every archived topic, each partition at its archived end with the epoch to restore
    it above (its last known one, at least ``restore_epoch_floor``) and the log start
    DeleteRecords moved."""
    floor = restore_epoch_floor(clock_ms())
    progress = {
        (r["topic"], r["partition"]): r["archived_through"]
        for r in await conn.fetch("SELECT topic, partition, archived_through FROM archive_progress")
    }
    states = {
        (r["topic"], r["partition"]): (r["leader_epoch"], r["log_start"])
        for r in await conn.fetch(
            "SELECT topic, partition, leader_epoch, log_start FROM partition_state"
        )
    }
    topics = []
    for r in await conn.fetch(
        "SELECT name, topic_id, partitions, page_size, ttl, max_pages, created, configs,"
        " replication_factor FROM topic ORDER BY name"
    ):
        name = r["name"]
        if r["configs"] is None:  # archived before topics had Kafka's configs
            configs = legacy_configs(r["page_size"], r["ttl"], r["max_pages"])
        else:
            configs = configs_from_json(r["configs"])
        config = TopicConfig(
            name,
            r["partitions"],
            configs=configs,
            created_ms=r["created"][0] // 1000 + PG_EPOCH_MS,
            topic_id=uuid.UUID(str(r["topic_id"])).bytes,
            replication_factor=r["replication_factor"],
        )
        partitions = []
        for p in range(config.partitions):
            epoch, log_start = states.get((name, p), (0, 0))
            # Deleted offsets are accounted for like archived ones: never handed out again.
            log_end = max(progress.get((name, p), 0), log_start)
            partitions.append(RestoredPartition(log_end, max(epoch, floor), log_start))
        topics.append(RestoredTopic(config, partitions))
    return topics


async def recover(log: Log, pool: asyncpg.Pool) -> bool:
    """If Redis lost its data, restore it from the archive; True if it did.

    Usable as the Log's ``recover`` callback: ``Log(redis, recover=lambda log:
    recover(log, pool))``."""
    if not await log.needs_recovery():
        return False
    async with pool.acquire() as conn:
        await check_pool(conn)
        await ensure_schema(conn)
        topics = await restored_topics(conn)
        # Ids up to the watermark may have been handed out even where no row shows them
        # (records of a topic deleted before they were archived): never hand them out again.
        # Nor the ids of deleted topics' records and producers.
        watermark = await conn.fetchval("SELECT id FROM archive_watermark")
        sequence_floor = await conn.fetchval(
            "SELECT GREATEST((SELECT coalesce(max(id), 0) FROM record),"
            " (SELECT id FROM archive_watermark),"
            " (SELECT coalesce(max(last_id), 0) FROM dropped_range),"
            " (SELECT coalesce(max(max_id), 0) FROM deleted_topic))"
        )
        if sequence_floor > watermark:
            # Redis held the records above the watermark that are not archived: they are
            # lost. Say so, so the watermark may pass their ids and readers report them.
            await conn.execute(
                "INSERT INTO lost_range (first_id, last_id) VALUES ($1, $2)"
                " ON CONFLICT (first_id) DO UPDATE SET last_id = GREATEST("
                "lost_range.last_id, EXCLUDED.last_id)",
                watermark + 1,
                sequence_floor,
            )
        producer_id_floor = await conn.fetchval(
            "SELECT GREATEST((SELECT coalesce(max(max_producer_id), 0) FROM archive_progress),"
            " (SELECT coalesce(max(max_producer_id), 0) FROM deleted_topic))"
        )
        archived_id = await conn.fetchval("SELECT id FROM cluster")
        committed = await group_offsets.load(conn)
        states = await group_offsets.load_states(conn)
        shares = await share_state.load(conn)
    if archived_id is not None:
        # Kafka clients notice a changed cluster id; keep the one they knew. Redis lost its
        # data, so an id it got since (a broker started on it) is the archive's again.
        await log.stores.set_cluster_id(archived_id)
    await log.restore(topics, sequence_floor, producer_id_floor)
    # Record the epochs the restore gave the partitions, so a second loss bumps past them.
    rows: list[tuple[str, int, int]] = []
    for topic in topics:
        name = topic.config.name
        epochs = await log.leader_epochs(name, range(topic.config.partitions))
        rows += [(name, partition, epoch) for partition, epoch in enumerate(epochs)]
    if rows:
        async with pool.acquire() as conn:
            await conn.executemany(_EPOCH, rows)
    # The groups last: their members' sessions start as they are restored, and must not
    # run out before the recovery ends and their heartbeats are answered again.
    log_ends = {
        (topic.config.name, p): restored.log_end
        for topic in topics
        for p, restored in enumerate(topic.partitions)
    }
    restored = log.stores.offsets.restore(committed, log_ends, states, clock_ms())
    for c in await restored:
        logger.warning(
            "group %s: committed offset %d of %s[%d] is past the restored log end %d: it"
            " read records lost with Redis, and new records take offsets from %d (kept as"
            " committed, with its leader epoch, so the group's consumers are told)",
            c.group_id,
            c.committed,
            c.topic,
            c.partition,
            c.log_end,
            c.log_end,
        )
    for past in await log.stores.share.restore(shares, log_ends):
        logger.warning(
            "share group %s: %s[%d] started at %d, past the restored log end %d: it had"
            " records lost with Redis; it starts again at the end",
            past.group_id,
            past.topic,
            past.partition,
            past.start,
            past.log_end,
        )
    return True
