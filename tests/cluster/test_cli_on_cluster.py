"""The CLI's produce/consume round trips with ``--redis-url redis+cluster://...``."""

from __future__ import annotations

import pytest

from tests.cluster_servers import ClusterServers
from tests.test_cli import (  # noqa: F401 (the fixture)
    ks,
    test_compressed_batches_round_trip,
    test_keyless_records_round_robin_per_batch,
    test_produce_then_consume_keeps_lines_byte_for_byte,
)


@pytest.fixture
def redis_url(empty_cluster: ClusterServers) -> str:
    return empty_cluster.cluster_url
