"""Data in both tiers for the console's tests: topics whose older pages were archived to
PostgreSQL and dropped from Redis (max-pages 1), newer ones in Redis only; JSON, text and
binary values, keys and headers; a group with committed offsets."""

from __future__ import annotations

import json

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.connect import redis_client
from kafkaesque.hot.log import Log
from kafkaesque.records.build import build_batch
from storage_pg.tiered import Archive, attach

ORDERS = "orders"  # 2 partitions, 40 records each, the first 30 archived and gone from Redis
NOTES = "notes"  # 1 partition of text and binary values, in Redis only
SECRET = "secret-plans"  # a topic a user without ACLs on it must never see
PER_PARTITION = 40
PAGE = 10
BASE_TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def order(partition: int, i: int) -> bytes:
    return json.dumps({"order": i, "partition": partition, "item": f"widget-{i}"}).encode()


async def tiered_log(redis_url: str, dsn: str) -> tuple[Log, Archive]:
    """A Log tiered over the archive at ``dsn``, as the CLI builds one."""
    log = Log(redis_client(redis_url))
    archive = Archive(dsn)
    attach(log, archive)
    await archive.bind()
    return log, archive


async def fill(redis_url: str, dsn: str) -> None:
    """Create and fill the topics, archive, and let Redis drop the archived pages."""
    log, archive = await tiered_log(redis_url, dsn)
    try:
        await log.enable_archiving()  # else retention drops pages before they are archived
        await log.create_topic(TopicConfig(ORDERS, 2, page_size=PAGE, max_pages=1))
        await log.create_topic(TopicConfig(NOTES, 1))
        await log.create_topic(TopicConfig(SECRET, 1))
        for p in range(2):
            for start in range(0, PER_PARTITION, PAGE):
                n = range(start, start + PAGE)
                batch = build_batch(
                    [order(p, i) for i in n],
                    [f"customer-{i % 7}".encode() for i in n],
                    timestamps=[BASE_TS + i * 60_000 for i in n],
                    headers=[[("source", b"shop"), ("trace", f"t{i}".encode())] for i in n],
                )
                await log.append(ORDERS, p, [batch])
        values = [b"plain text note", b"\x00\x01\x02\xffbinary", b'{"nested": {"ok": true}}']
        await log.append(NOTES, 0, [build_batch(values, [b"k1", None, b"k3"])])
        await log.append(SECRET, 0, [build_batch([b"do not show"])])
        archiver = await archive.archiver(log, idle_close_ms=0)
        await archiver.run_once()
        for p in range(2):
            await log.state(ORDERS, p)  # applies retention: the archived pages go
    finally:
        await archive.close()
        await log.stores.close()


async def commit(redis_url: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for an empty group, as a consumer outside a group (or a reset) does."""
    from kafkaesque.groups.coordinator import GroupCoordinator

    log = Log(redis_client(redis_url))
    try:
        await GroupCoordinator(log).admin.reset_offsets(group, offsets)
    finally:
        await log.stores.close()
