"""A share group after Redis loses its data (KIP-932 state in the archive): an archiving
broker, records accepted and acquired, the archiver's pass, FLUSHALL; the broker restores
from the archive before the next share request, and the share-partition comes back: the
accepted records are never delivered again, the acquired ones are, a second time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg
import redis

from tests.kafka_client import Connection
from tests.storage.test_served import archived_through, archiving_broker, wait_until  # noqa: F401
from tests.wire.common import produce_numbered
from tests.wire.conftest import Broker
from tests.wire.test_share_raw import (
    describe_offsets,
    joined,
    only_partition,
    set_group_configs,
    share_ack,
    share_fetch,
    topic_id,
)


def archived_starts(pg_dsn: str) -> list[tuple[str, int]]:
    """(group, start offset) of every share-partition the archive holds."""

    async def read() -> list[tuple[str, int]]:
        conn = await asyncpg.connect(pg_dsn)
        try:
            rows = await conn.fetch("SELECT group_id, start_offset FROM share_partition_state")
        except asyncpg.UndefinedTableError:
            return []
        finally:
            await conn.close()
        return [(bytes(r["group_id"]).decode(), r["start_offset"]) for r in rows]

    return asyncio.run(read())


def test_share_partitions_come_back_after_a_redis_flush(
    redis_url: str,
    pg_dsn: str,
    archiving_broker: Callable[[], Broker],  # noqa: F811
) -> None:
    broker = archiving_broker()
    topic, group = "jobs", "workers"
    # Pages of 10 records: two closed pages, archived at once.
    assert broker.cli("create", topic, "--page-size", "10").returncode == 0
    produce_numbered(broker.bootstrap, topic, 1, 0, 20, batch=10)
    with Connection(broker.bootstrap) as conn:
        set_group_configs(conn, group, share_auto_offset_reset="earliest")
        tid = topic_id(conn, topic)
        member, _ = joined(conn, group, topic)
        got = only_partition(share_fetch(conn, group, member, 0, tid))
        assert [(r.first_offset, r.last_offset) for r in got.acquired_records] == [(0, 19)]
        assert only_partition(share_ack(conn, group, member, 1, tid, [(0, 9, [1])])).error_code == 0
    wait_until(lambda: archived_through(pg_dsn, topic) >= 20, "the records archived")
    wait_until(lambda: (group, 10) in archived_starts(pg_dsn), "the share-partition archived")
    redis.Redis.from_url(redis_url).flushall()  # Redis loses everything
    with Connection(broker.bootstrap) as conn:
        # The group comes back empty (members join again), its share-partition as archived.
        member, _ = joined(conn, group, topic)
        assert describe_offsets(conn, group, topic) == (10, 10)
        again = only_partition(share_fetch(conn, group, member, 0, topic_id(conn, topic)))
        runs = [(r.first_offset, r.last_offset, r.delivery_count) for r in again.acquired_records]
        assert runs == [(10, 19, 2)]  # never 0-9: accepted before the loss
