"""The console on a Redis Cluster (3 primaries): the same layers, so the same pages; a
smoke test of every page, records across the cluster's slots, a group's lag, a change."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aiohttp.test_utils import TestClient

from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.hot.log import Log
from tests.cluster_servers import ClusterServers
from tests.test_console import csrf_of, page, run

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterServers]:
    servers = ClusterServers(tmp_path_factory.mktemp("cluster"))
    yield servers
    servers.stop()


def test_every_page_on_a_cluster(cluster: ClusterServers) -> None:
    cluster.flushall()

    async def scenario(client: TestClient, log: Log) -> None:
        await GroupCoordinator(log).admin.reset_offsets("g", {("words", 0): 1, ("words", 1): 0})
        for url in ("/", "/topics", "/topics/words", "/groups", "/archive", "/security"):
            await page(client, url)
        listing = await page(client, "/topics")
        assert "Topics (2)" in listing
        shown = await page(client, "/topics/words/messages")
        assert shown.count('class="tier redis"') == 5 and "other partition" in shown
        assert '<b id="total-lag">4</b>' in await page(client, "/groups/g")
        token = csrf_of(listing)
        answer = await client.post(
            "/topics", data={"name": "made", "partitions": "3", "csrf": token}
        )
        assert answer.status == 200
        assert (await log.topic("made")).partitions == 3

    run(cluster.cluster_url, scenario, admin=True)
