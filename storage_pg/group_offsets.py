"""Consumer groups' committed offsets kept in the archive, so they survive Redis losing its
data: the archiver copies every group's offsets on each pass (``save``), and recovery gives
them back to Redis with the topics (``load``, then ``OffsetStore.restore``).

The table mirrors Redis as of one snapshot: a pass replaces its contents in one
transaction, so groups deleted and topics forgotten in Redis leave the archive too. Each
snapshot carries Redis' clock; an older snapshot (a slower archiver running at the same
time) never overwrites a newer one.

Each classic group's state (generation, members, assignment) is kept beside its offsets
(``group_state``, migration 9), so a restore gives the group back with its members.

Group ids and metadata are whatever strings clients chose, NUL included, which a
PostgreSQL ``text`` value cannot hold (one commit with metadata "a\\0b" used to fail every
pass's COPY): they are kept as their UTF-8 bytes in ``bytea`` columns (migration 8,
``BYTEA_MIGRATION``), so they come back byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from kafkaesque.hot.group_offsets import CommittedOffset, OffsetsSnapshot
from kafkaesque.types import TopicPartition


def snapshot_table(name: str) -> str:
    """The SQL creating ``replace_snapshot``'s table ``name``: one row, the Redis clock
    (ms) of the snapshot archived, 0 before the first."""
    return f"""
    CREATE TABLE {name} (
        as_of_ms bigint NOT NULL
    );
    CREATE UNIQUE INDEX {name}_single_row ON {name} ((true));
    INSERT INTO {name} (as_of_ms) VALUES (0);
"""


MIGRATION = f"""
    CREATE TABLE group_offset (
        group_id text COLLATE "C" NOT NULL,
        topic text COLLATE "C" NOT NULL,
        partition int NOT NULL,
        "offset" bigint NOT NULL,
        metadata text NOT NULL,
        commit_ms bigint NOT NULL,
        leader_epoch int NOT NULL,
        PRIMARY KEY (group_id, topic, partition)
    );
    {snapshot_table("group_offset_snapshot")}
    COMMENT ON TABLE group_offset IS
        'committed consumer group offsets as of group_offset_snapshot.as_of_ms (Redis clock)';
"""

# 8: group ids and metadata as UTF-8 bytes. convert_to turns the rows archived so far (no
# NUL in them: the COPY refused those) from the database's encoding into UTF-8.
BYTEA_MIGRATION = """
    ALTER TABLE group_offset
        ALTER COLUMN group_id TYPE bytea USING convert_to(group_id, 'UTF8'),
        ALTER COLUMN metadata TYPE bytea USING convert_to(metadata, 'UTF8');
    COMMENT ON COLUMN group_offset.group_id IS 'the group id in UTF-8 (any string, NUL included)';
    COMMENT ON COLUMN group_offset.metadata IS 'the commit''s metadata in UTF-8 (any string)';
"""

# 9: each classic group's state (kafkaesque.groups.state.Group.pack: generation, members,
# assignment), so a restore gives the group back with its members rather than empty.
STATE_MIGRATION = """
    CREATE TABLE group_state (
        group_id bytea PRIMARY KEY,
        state bytea NOT NULL
    );
    COMMENT ON TABLE group_state IS
        'each classic group''s state as Redis had it at group_offset_snapshot.as_of_ms';
"""

_COLUMNS = ("group_id", "topic", "partition", "offset", "metadata", "commit_ms", "leader_epoch")


async def save(conn: asyncpg.Connection, snapshot: OffsetsSnapshot) -> bool:
    """Replace the archived offsets with ``snapshot``; False if a newer one is archived."""
    rows = [
        (
            group_id.encode(),
            topic,
            partition,
            o.offset,
            o.metadata.encode(),
            o.commit_ms,
            o.leader_epoch,
        )
        for group_id, offsets in snapshot.groups.items()
        for (topic, partition), o in offsets.items()
    ]
    states = [(group_id.encode(), state) for group_id, state in snapshot.states.items()]
    return await replace_snapshot(
        conn,
        "group_offset_snapshot",
        snapshot.as_of_ms,
        [("group_offset", _COLUMNS, rows), ("group_state", ("group_id", "state"), states)],
    )


async def replace_snapshot(
    conn: asyncpg.Connection,
    snapshot_table: str,
    as_of_ms: int,
    tables: Sequence[tuple[str, Sequence[str], list[tuple[Any, ...]]]],
) -> bool:
    """Replace the rows of each of ``tables`` (name, columns, rows) with a snapshot's taken
    at ``as_of_ms`` (Redis' clock), in one transaction; False, and nothing changed, if
    ``snapshot_table``'s one row says a snapshot as new is archived."""
    async with conn.transaction():
        # The row lock serialises archivers; the comparison keeps the newest snapshot.
        as_of = await conn.fetchval(f"SELECT as_of_ms FROM {snapshot_table} FOR UPDATE")
        if as_of >= as_of_ms:
            return False
        for table, columns, rows in tables:
            await conn.execute(f"DELETE FROM {table}")
            if rows:
                await conn.copy_records_to_table(table, records=rows, columns=columns)
        await conn.execute(f"UPDATE {snapshot_table} SET as_of_ms = $1", as_of_ms)
    return True


async def load(conn: asyncpg.Connection) -> dict[str, dict[TopicPartition, CommittedOffset]]:
    """Every archived group's offsets, group ids and metadata as clients committed them."""
    groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
    for r in await conn.fetch(
        "SELECT " + ", ".join(f'"{c}"' for c in _COLUMNS) + " FROM group_offset"
    ):
        groups.setdefault(r["group_id"].decode(), {})[r["topic"], r["partition"]] = CommittedOffset(
            r["offset"], r["metadata"].decode(), r["commit_ms"], r["leader_epoch"]
        )
    return groups


async def load_states(conn: asyncpg.Connection) -> dict[str, bytes]:
    """Every archived classic group's state (``Group.pack``), by group id."""
    return {
        bytes(r["group_id"]).decode(): bytes(r["state"])
        for r in await conn.fetch("SELECT group_id, state FROM group_state")
    }
