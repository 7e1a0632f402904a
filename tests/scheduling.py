"""How scripts/test.sh spreads the suite over pytest-xdist workers (``--dist loadfile``).

A test module is one unit of work: its module-scoped servers (a broker, a cluster) start
once, on the one worker that runs it. The Spark modules are one unit, so that one JVM runs
at a time. Units go out longest first (measured seconds, below), so that no long module
starts last while the other workers have nothing left to do; units not listed are short
and follow in collection order. Without xdist, or with another ``--dist``, nothing here
applies.
"""

from __future__ import annotations

import pytest

# Directories whose modules form one unit of work.
GROUPED = ("tests/spark/",)

# Seconds the longest units took, measured in a parallel run of the whole suite (4 workers
# on 2 cores: slower than alone, but in proportion). Update when a module grows a lot.
SECONDS: dict[str, float] = {
    "tests/spark/": 298,
    "tests/wire/test_acls.py": 70,
    "tests/fuzz/test_fuzz.py": 70,
    "tests/cluster/test_sentinel.py": 69,
    "tests/wire/test_group_after_redis_loss.py": 68,
    "tests/test_cli_store.py": 62,
    "tests/storage/test_gaps.py": 53,
    "tests/cluster/test_cluster_failover.py": 51,
    "tests/storage/test_crash.py": 49,
    "tests/wire/test_clients.py": 46,
    "tests/storage/test_redis_loss.py": 46,
    "tests/wire/test_groups_members.py": 44,
    "tests/test_cli_process.py": 44,
    "tests/storage/test_served.py": 39,
    "tests/chaos/test_chaos.py": 37,
    "tests/jepsen/test_jepsen.py": 37,
    "tests/wire/test_cli_wire_mock.py": 35,
    "tests/storage/test_client_strings.py": 35,
    "tests/cluster/test_wire_on_cluster.py": 35,
    "tests/test_isolation.py": 34,
    "tests/storage/test_cli_truncation.py": 32,
    "tests/wire/test_static_members_leave.py": 31,
    "tests/wire/test_brokers.py": 30,
    "tests/wire/test_cli_wire_acls.py": 30,
    "tests/console/test_browser.py": 28,
    "tests/wire/test_transactions.py": 27,
    "tests/wire/test_acls_sasl.py": 27,
    "tests/wire/test_kcat.py": 20,
    "tests/wire/test_groups_confluent.py": 19,
    "tests/storage/test_pg_ssl.py": 19,
    "tests/storage/test_memory.py": 19,
    "tests/wire/test_groups_raw.py": 19,
    "tests/storage/test_high_watermark.py": 19,
    "tests/storage/test_durability.py": 18,
    "tests/power/test_power_cut.py": 18,
    "tests/wire/test_sasl_bad_input.py": 18,
    "tests/wire/test_topic_metrics.py": 18,
    "tests/cluster/test_log_on_cluster.py": 17,
    "tests/storage/test_binding.py": 16,
    "tests/wire/test_redis_auth.py": 15,
    "tests/wire/test_fetch_sessions.py": 15,
    "tests/wire/test_transactions_fetch.py": 14,
    "tests/cluster/test_cluster_fixture.py": 14,
    "tests/wire/test_consumer_protocol.py": 13,
    "tests/test_run_script.py": 13,
    "tests/wire/test_slow_clients.py": 13,
    "tests/storage/test_archive.py": 13,
    "tests/storage/test_rows.py": 13,
    "tests/wire/test_log_floods.py": 12,
    "tests/storage/test_embedded.py": 12,
}


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module, or its grouped directory."""
    path = nodeid.split("::", 1)[0]
    for directory in GROUPED:
        if path.startswith(directory):
            return directory
    return path


def longest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` (in place): the units' tests, longest unit first; the order within
    a unit, and of the units not in SECONDS, stays."""
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(unit_of(item.nodeid), len(first_seen))

    def key(item: pytest.Item) -> tuple[float, int]:
        unit = unit_of(item.nodeid)
        return -SECONDS.get(unit, 0.0), first_seen[unit]

    items.sort(key=key)


def applies(config: pytest.Config) -> bool:
    return config.pluginmanager.hasplugin("xdist") and config.getoption("dist") == "loadfile"


def make_scheduler(config: pytest.Config, log: object) -> object:
    """A LoadScopeScheduling over ``unit_of``'s units, handed out in the workers' order
    (``longest_first``) instead of by their number of tests."""
    from xdist.scheduler import LoadScopeScheduling

    class LongestFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False
    return LongestFirst(config, log)
