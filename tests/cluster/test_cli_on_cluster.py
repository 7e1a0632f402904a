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


def test_every_command_on_a_cluster(ks, pg_dsn: str) -> None:  # noqa: F811 (the fixture)
    """The rest of the CLI against a cluster: topics, configs, records deletion,
    compaction, groups, users, ACLs, quotas, transactions, brokers and one archive pass
    (its watermark from the slots' clocks)."""
    from tests.test_cli import ok

    ok(ks("create", "kv", "--partitions", "3", "--config", "cleanup.policy=compact"))
    ok(ks("create", "plain", "--partitions", "4"))
    ok(ks("produce", "kv", "--key-separator", "=", input=b"a=1\nb=2\na=3\n"))
    ok(ks("produce", "plain", input=b"x\ny\nz\n"))
    assert ok(ks("topics")).stdout.split() == ["kv", "plain"]
    assert "cleanup.policy=compact" in ok(ks("describe", "kv")).stdout
    ok(ks("alter", "plain", "--partitions", "6", "--config", "retention.ms=3600000"))
    assert "partitions  6" in ok(ks("describe", "plain")).stdout
    assert sorted(ok(ks("consume", "plain", "--group", "g1")).stdout.split()) == ["x", "y", "z"]
    ok(ks("delete-records", "plain", "--before", "end"))
    ok(ks("compact", "kv"))
    assert "g1" in ok(ks("groups")).stdout
    ok(ks("group", "g1", "plain", "--reset-offsets", "earliest", "--execute"))
    ok(ks("users", "add", "alice", "--password-stdin", input=b"secret-pw\n"))
    assert "alice" in ok(ks("users", "list")).stdout
    ok(ks("acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "kv"))
    assert "alice" in ok(ks("acls", "list")).stdout
    ok(ks("quotas", "set", "--user", "alice", "--producer-byte-rate", "1024"))
    assert "1024" in ok(ks("quotas", "list")).stdout
    ok(ks("transactions", "list"))
    assert ok(ks("brokers")).stderr == "no broker is running\n"
    ok(ks("--pg-dsn", pg_dsn, "archive", "--once", "--idle-close", "0.001"))
    status = ok(ks("--pg-dsn", pg_dsn, "archive", "--status")).stdout
    watermark = int(status.split("watermark: ")[1].split()[0])
    assert watermark > 2**40, status  # a slot clock's id: counter * 2^14 + slot
    # compacted after the pass: the latest value of each key
    assert sorted(ok(ks("consume", "kv", "--format", "value")).stdout.split()) == ["2", "3"]
    ok(ks("delete", "kv"))
    assert ok(ks("topics")).stdout.split() == ["plain"]
