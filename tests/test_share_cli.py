"""Share groups in the CLI's groups and group commands (direct mode): listed with their
type, described by their share-partitions' start offsets and lag, offsets reset only while
empty, deleted; through click's runner against a real redis-server."""

from __future__ import annotations

import asyncio
import json

import redis.asyncio

from kafkaesque.groups.share.coordinator import ShareGroupCoordinator
from kafkaesque.groups.share.fetch import ShareFetcher
from kafkaesque.groups.share.state import ShareHeartbeat
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import Partitions
from tests.test_cli import ks, ok, one_line_error  # noqa: F401  (ks is a fixture)


def share_member(redis_url: str, group: str, topic: str, accept: int) -> None:
    """A member joins the share group, acquires every record and accepts the first
    ``accept`` (``accept`` -1: it leaves instead)."""

    async def run() -> None:
        log = Log(redis.asyncio.Redis.from_url(redis_url))
        coordinator = ShareGroupCoordinator(log)
        try:
            if accept < 0:
                await coordinator.heartbeat(group, ShareHeartbeat("m1", -1))
                return
            await log.redis.hset(
                log.keys.group_configs(group), "share.auto.offset.reset", "earliest"
            )
            await coordinator.heartbeat(
                group, ShareHeartbeat("m1", 0, topics=[topic], client_id="app-1")
            )
            fetcher = ShareFetcher(coordinator, Partitions(log))
            await fetcher.fetch(group, "m1", [(topic, 0)], 0, 1, 1 << 20, 100)
            await fetcher.acknowledge(group, "m1", {(topic, 0): [(0, accept - 1, [1])]})
        finally:
            coordinator.close()
            await log.redis.aclose()

    asyncio.run(run())


def test_share_groups_listed_described_reset_and_deleted(ks, redis_url) -> None:  # noqa: F811
    ok(ks("create", "q"))
    ok(ks("produce", "q", input=b"a\nb\nc\n"))
    share_member(redis_url, "jobs", "q", accept=2)
    table = ok(ks("groups")).stdout.splitlines()
    assert [line.split() for line in table] == [
        ["GROUP", "STATE", "TYPE"],
        ["jobs", "Stable", "share"],
    ]
    document = json.loads(ok(ks("group", "jobs", "--format", "json")).stdout)
    assert (document["type"], document["state"], len(document["members"])) == ("share", "Stable", 1)
    [row] = document["offsets"]
    # The share-partition's start: 0 and 1 accepted, 2 in flight (lag 1).
    assert (row["topic"], row["current_offset"], row["log_end"], row["lag"]) == ("q", 2, 3, 1)
    refused = ks("group", "jobs", "q", "--reset-offsets", "earliest", "--execute")
    one_line_error(refused, 1, "active members")
    share_member(redis_url, "jobs", "q", accept=-1)  # the member leaves
    ok(ks("group", "jobs", "q", "--reset-offsets", "earliest", "--execute"))
    [row] = json.loads(ok(ks("group", "jobs", "--format", "json")).stdout)["offsets"]
    assert (row["current_offset"], row["lag"]) == (0, 3)
    ok(ks("group", "jobs", "--delete"))
    one_line_error(ks("group", "jobs"), 1, "no such group")
