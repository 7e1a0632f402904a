"""tests/test_groups.py and tests/test_consumer_groups.py against the 3-primary cluster
fixture: groups in slots of their own, the index sets in the catalog's (a superset of the
groups that exist: kafkaesque/hot/group_offsets.py ``indexed``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import tests.test_consumer_groups
import tests.test_groups
from kafkaesque.errors import Code
from kafkaesque.groups.coordinator import CoordinatorConfig, GroupCoordinator
from kafkaesque.hot.connect import redis_client
from kafkaesque.hot.group_offsets import OffsetStore
from kafkaesque.hot.log import Log
from tests.cluster_servers import ClusterServers
from tests.test_groups import coordinator  # noqa: F401 (the fixture, on make_log below)


@pytest.fixture
def make_log(empty_cluster: ClusterServers) -> Callable[[], Log]:
    return lambda: Log(redis_client(empty_cluster.cluster_url))


for _module in (tests.test_groups, tests.test_consumer_groups):
    for _name, _item in vars(_module).items():
        if _name.startswith("test_") and callable(_item):
            globals()[_name] = _item


def test_offsets_snapshot_and_restore_per_group(empty_cluster: ClusterServers) -> None:
    """On a cluster each group's offsets are read in a MULTI of their own; restore writes
    them back one group at a time, each listed before it is written."""

    async def scenario() -> None:
        log = Log(redis_client(empty_cluster.cluster_url))
        await log.ensure_recovered()
        groups = GroupCoordinator(log, CoordinatorConfig(initial_rebalance_delay_ms=0))
        for gid, offset in (("a", 3), ("b", 7), ("c{x}", 9)):
            error = await groups.admin.commit(gid, -1, "", None, {("t", 0): (offset, "m", -1)})
            assert error == Code.NONE
        store = OffsetStore(log.redis, log.keys)
        snapshot = await store.snapshot()
        assert snapshot is not None and snapshot.as_of_ms > 0
        assert {g: o[("t", 0)].offset for g, o in snapshot.groups.items()} == {
            "a": 3,
            "b": 7,
            "c{x}": 9,
        }
        await log.redis.flushall()
        assert await store.snapshot() is None  # the catalog lost its data
        await log.ensure_recovered()
        past_end = await store.restore(snapshot.groups, {("t", 0): 8})
        assert [(c.group_id, c.committed, c.log_end) for c in past_end] == [("c{x}", 9, 8)]
        again = await store.snapshot()
        assert {g: o[("t", 0)].offset for g, o in again.groups.items()} == {
            "a": 3,
            "b": 7,
            "c{x}": 9,
        }
        assert sorted(await groups.admin.list_groups()) == ["a", "b", "c{x}"]
        await log.redis.aclose()

    asyncio.run(scenario())
