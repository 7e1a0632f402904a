"""tests/test_log.py, tests/test_log_steps.py and tests/test_sequence.py against the
3-primary cluster fixture, through ``redis+cluster://`` (kafkaesque.connect.cluster_client):
the Log in the cluster layout, topics in steps, appends on the partitions' shards."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import tests.test_log
import tests.test_log_steps
import tests.test_sequence
from kafkaesque.connect import HotTierCluster, redis_client
from kafkaesque.log import Log
from tests.cluster_servers import ClusterServers

# Tests that name single-Redis keys ("ks:archiving", "ks:gseq") or count on one counter
# (ids 1, 2, 3...: on a cluster ids are the slots' clocks, docs/scale-out.md 3.6).
SINGLE_REDIS_ONLY = {
    "test_one_redis_keeps_one_counter",
    "test_cluster_mode_ids_follow_the_slot_clock",  # the cluster layout on one server
    "test_global_sequence_follows_produce_order_across_topics",
    "test_archiving_keeps_pages_until_archived_then_applies_retention",
    "test_lost_redis_waits_for_recovery_and_restores_offsets",  # test_log_steps' instead
    "test_archiving_is_a_field_of_every_partition",
}


@pytest.fixture
def make_log(empty_cluster: ClusterServers) -> Callable[[], Log]:
    def make() -> Log:
        client = redis_client(empty_cluster.cluster_url)
        assert isinstance(client, HotTierCluster)
        return Log(client)

    return make


def _collect(module) -> dict[str, object]:
    return {
        name: test
        for name, test in vars(module).items()
        if name.startswith("test_") and callable(test) and name not in SINGLE_REDIS_ONLY
    }


for _module in (tests.test_log, tests.test_log_steps, tests.test_sequence):
    for _name, _test in _collect(_module).items():
        globals()[_name] = _test
