"""Share groups' share-partition state kept in the archive (KIP-932), so it survives Redis
losing its data: the archiver copies every share-partition's start and end offsets,
running totals and in-flight records on each pass (``save``), as it copies committed
offsets (storage_pg/group_offsets.py), and recovery gives them back (``load``, then
``ShareStore.restore``).

The table mirrors Redis as of one snapshot, replaced whole in one transaction; an older
snapshot (a slower archiver at the same time) never overwrites a newer one. What a restore
cannot give back is what happened after the last pass: records acknowledged since are
delivered again (at least once, never lost), and records acquired then come back
AVAILABLE with their delivery counts.
"""

from __future__ import annotations

import asyncpg
import msgpack

from kafkaesque.hot.share_store import PartitionState, ShareSnapshot
from kafkaesque.types import TopicPartition
from storage_pg.group_offsets import replace_snapshot, snapshot_table

MIGRATION = f"""
    CREATE TABLE share_partition_state (
        group_id bytea NOT NULL,
        topic text COLLATE "C" NOT NULL,
        partition int NOT NULL,
        start_offset bigint NOT NULL,
        end_offset bigint NOT NULL,
        state bytea NOT NULL,
        PRIMARY KEY (group_id, topic, partition)
    );
    {snapshot_table("share_state_snapshot")}
    COMMENT ON TABLE share_partition_state IS
        'share groups'' share-partitions (KIP-932) as of share_state_snapshot.as_of_ms: start '
        'and end offsets; state is msgpack [totals, {{offset: in-flight record state}}]';
"""

_COLUMNS = ("group_id", "topic", "partition", "start_offset", "end_offset", "state")


async def save(conn: asyncpg.Connection, snapshot: ShareSnapshot) -> bool:
    """Replace the archived share-partitions with ``snapshot``; False if a newer one is
    archived."""
    rows = [
        (
            group_id.encode(),
            topic,
            partition,
            s.start,
            s.end,
            msgpack.packb([s.totals, s.records]),
        )
        for group_id, partitions in snapshot.groups.items()
        for (topic, partition), s in partitions.items()
    ]
    tables = [("share_partition_state", _COLUMNS, rows)]
    return await replace_snapshot(conn, "share_state_snapshot", snapshot.as_of_ms, tables)


async def load(conn: asyncpg.Connection) -> dict[str, dict[TopicPartition, PartitionState]]:
    """Every archived share-partition, by group id."""
    groups: dict[str, dict[TopicPartition, PartitionState]] = {}
    for r in await conn.fetch("SELECT " + ", ".join(_COLUMNS) + " FROM share_partition_state"):
        totals, records = msgpack.unpackb(bytes(r["state"]), strict_map_key=False)
        state = PartitionState(
            r["start_offset"],
            r["end_offset"],
            totals=dict(totals),
            records={int(o): v for o, v in records.items()},
        )
        groups.setdefault(bytes(r["group_id"]).decode(), {})[r["topic"], r["partition"]] = state
    return groups
