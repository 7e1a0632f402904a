"""Fixtures for the scale-out work: a real 3-primary cluster and a Sentinel setup, each
started once per module (tests/cluster_servers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster_servers import ClusterServers, SentinelServers


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterServers]:
    """3 primaries, no replicas, all 16384 slots assigned."""
    servers = ClusterServers(tmp_path_factory.mktemp("cluster"))
    yield servers
    servers.stop()


@pytest.fixture(scope="module")
def replicated_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterServers]:
    """3 primaries with one replica each."""
    servers = ClusterServers(tmp_path_factory.mktemp("cluster-replicas"), replicas=1)
    yield servers
    servers.stop()


@pytest.fixture
def empty_cluster(cluster: ClusterServers) -> ClusterServers:
    """The module's cluster, emptied for this test."""
    cluster.flushall()
    return cluster


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelServers]:
    """A primary, its replica and one sentinel watching them."""
    servers = SentinelServers(tmp_path_factory.mktemp("sentinel"))
    yield servers
    servers.stop()
