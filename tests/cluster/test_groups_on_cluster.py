"""tests/test_groups.py and tests/test_consumer_groups.py against the 3-primary cluster
fixture: groups in slots of their own, the index sets in the catalog's (a superset of the
groups that exist: kafkaesque/group_offsets.py ``indexed``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import tests.test_consumer_groups
import tests.test_groups
from kafkaesque.connect import redis_client
from kafkaesque.log import Log
from tests.cluster_servers import ClusterServers
from tests.test_groups import coordinator  # noqa: F401 (the fixture, on make_log below)


@pytest.fixture
def make_log(empty_cluster: ClusterServers) -> Callable[[], Log]:
    return lambda: Log(redis_client(empty_cluster.cluster_url))


for _module in (tests.test_groups, tests.test_consumer_groups):
    for _name, _item in vars(_module).items():
        if _name.startswith("test_") and callable(_item):
            globals()[_name] = _item
