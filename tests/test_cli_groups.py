"""The CLI's groups and group (kafka-consumer-groups' --list, --describe, --members,
--delete, --reset-offsets), --format json of every listing, the cluster id, and config
mistakes as usage errors: through click's runner against a real redis-server."""

from __future__ import annotations

import asyncio
import datetime
import json

import redis.asyncio

from kafkaesque.groups.consumer import ConsumerGroupCoordinator
from kafkaesque.groups.consumer_state import Heartbeat
from kafkaesque.hot.log import Log
from tests.test_cli import ks, ok, one_line_error  # noqa: F401  (ks is a fixture)


def consumer_member(redis_url: str, group: str, topic: str, leave: bool = False) -> None:
    """A KIP-848 member joins ``group`` subscribed to ``topic`` (or, ``leave``, leaves)."""

    async def beat() -> None:
        log = Log(redis.asyncio.Redis.from_url(redis_url))
        coordinator = ConsumerGroupCoordinator(log)
        try:
            if leave:
                await coordinator.heartbeat(group, Heartbeat("m1", -1), version=1)
            else:
                hb = Heartbeat(
                    "m1",
                    0,
                    rebalance_timeout_ms=30_000,
                    topics=[topic],
                    owned={},
                    client_id="app-1",
                    client_host="/10.0.0.7",
                )
                await coordinator.heartbeat(group, hb, version=1)
        finally:
            coordinator.close()
            await log.redis.aclose()

    asyncio.run(beat())


def as_json(result) -> object:  # type: ignore[no-untyped-def]
    return json.loads(ok(result).stdout)


def test_groups_lists_classic_and_consumer_groups_with_state_and_type(ks, redis_url) -> None:  # noqa: F811
    ok(ks("create", "t", "--partitions", "2"))
    ok(ks("produce", "t", "--partition", "0", input=b"a\nb\nc\n"))
    ok(ks("consume", "t", "--group", "old"))
    consumer_member(redis_url, "new", "t")
    table = ok(ks("groups")).stdout.splitlines()
    assert [line.split() for line in table] == [
        ["GROUP", "STATE", "TYPE"],
        ["new", "Stable", "consumer"],
        ["old", "Empty", "classic"],
    ]
    assert as_json(ks("groups", "--format", "json")) == [
        {"group": "new", "state": "Stable", "type": "consumer"},
        {"group": "old", "state": "Empty", "type": "classic"},
    ]


def test_group_describes_offsets_and_members_as_kafka_consumer_groups(ks, redis_url) -> None:  # noqa: F811
    ok(ks("create", "t", "--partitions", "2"))
    ok(ks("produce", "t", "--partition", "0", input=b"a\nb\nc\n"))
    ok(ks("produce", "t", "--partition", "1", input=b"x\n"))
    ok(ks("consume", "t", "--group", "old"))
    ok(ks("produce", "t", "--partition", "0", input=b"d\n"))
    out = ok(ks("group", "old")).stdout.splitlines()
    assert out[:3] == ["group       old", "type        classic", "state       Empty"]
    header = out.index(
        "TOPIC  PARTITION  CURRENT-OFFSET  LOG-START  LOG-END  LAG  CONSUMER-ID  HOST  CLIENT-ID"
    )
    assert [line.split() for line in out[header + 1 :]] == [
        ["t", "0", "3", "0", "4", "1", "-", "-", "-"],
        ["t", "1", "1", "0", "1", "0", "-", "-", "-"],
    ]
    doc = as_json(ks("group", "old", "t", "--format", "json"))
    assert isinstance(doc, dict)
    assert (doc["group"], doc["type"], doc["state"], doc["members"]) == (
        "old",
        "classic",
        "Empty",
        [],
    )
    assert doc["offsets"][0] == {
        "topic": "t",
        "partition": 0,
        "current_offset": 3,
        "log_start": 0,
        "log_end": 4,
        "lag": 1,
        "consumer_id": None,
        "host": None,
        "client_id": None,
    }
    # A consumer group (KIP-848): its member owns the partitions, and shows in --members.
    consumer_member(redis_url, "new", "t")
    rows = [line.split() for line in ok(ks("group", "new")).stdout.splitlines()]
    assert ["type", "consumer"] in rows and ["members", "1"] in rows
    assert ["t", "0", "-", "0", "4", "-", "m1", "/10.0.0.7", "app-1"] in rows
    members = ok(ks("group", "new", "--members")).stdout.splitlines()
    assert members[-2].split() == ["CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    assert members[-1].split() == ["m1", "/10.0.0.7", "app-1", "2", "t(0,1)"]
    doc = as_json(ks("group", "new", "--format", "json"))
    assert isinstance(doc, dict) and doc["epoch"] >= 1
    assert doc["members"] == [
        {
            "member_id": "m1",
            "instance_id": None,
            "client_id": "app-1",
            "host": "/10.0.0.7",
            "assignment": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}],
        }
    ]
    every = as_json(ks("group", "--all-groups", "--format", "json"))
    assert isinstance(every, list) and [g["group"] for g in every] == ["new", "old"]
    text = ok(ks("group", "--all-groups")).stdout
    assert "group       new" in text and "group       old" in text
    one_line_error(ks("group", "nosuch"), 1, "no such group: nosuch")
    one_line_error(ks("group"), 2, "give a GROUP, or --all-groups")
    one_line_error(ks("group", "old", "--all-groups"), 2, "--all-groups")


def test_group_delete_refused_with_members_of_either_type(ks, redis_url) -> None:  # noqa: F811
    ok(ks("create", "t"))
    ok(ks("produce", "t", input=b"a\n"))
    ok(ks("consume", "t", "--group", "old"))
    consumer_member(redis_url, "new", "t")
    one_line_error(ks("group", "new", "--delete"), 1, "NON_EMPTY_GROUP")
    assert "new" in ok(ks("groups")).stdout
    consumer_member(redis_url, "new", "t", leave=True)
    assert ok(ks("group", "new", "--delete")).stderr == "deleted group new\n"
    assert ok(ks("group", "old", "--delete")).stderr == "deleted group old\n"
    assert ok(ks("groups")).stdout == ""
    one_line_error(ks("group", "old", "--delete"), 1, "no such group: old")
    one_line_error(ks("group", "old", "t", "--delete"), 2, "--delete takes the GROUP alone")


def test_reset_offsets_is_a_dry_run_until_execute(ks, redis_url) -> None:  # noqa: F811
    ok(ks("create", "t", "--partitions", "2"))
    ok(ks("produce", "t", "--partition", "0", input=b"".join(b"%d\n" % i for i in range(10))))
    ok(ks("produce", "t", "--partition", "1", input=b"a\nb\n"))
    ok(ks("consume", "t", "--group", "g"))

    def committed() -> list[object]:
        doc = as_json(ks("group", "g", "--format", "json"))
        assert isinstance(doc, dict)
        return [r["current_offset"] for r in doc["offsets"]]

    dry = ok(ks("group", "g", "t", "--reset-offsets", "earliest"))
    assert [line.split() for line in dry.stdout.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        ["g", "t", "0", "0"],
        ["g", "t", "1", "0"],
    ]
    assert dry.stderr.startswith("dry run: would reset 2 partitions of t for group g")
    assert committed() == [10, 2]  # nothing changed
    shifted = as_json(ks("group", "g", "t", "--shift-by", "-3", "--execute", "--format", "json"))
    assert shifted == [
        {"group": "g", "topic": "t", "partition": 0, "new_offset": 7},
        {"group": "g", "topic": "t", "partition": 1, "new_offset": 0},  # clamped
    ]
    assert committed() == [7, 0]
    ok(ks("group", "g", "--all-topics", "--reset-offsets", "latest", "--execute"))
    assert committed() == [10, 2]
    ok(ks("group", "g", "t", "--reset-offsets", "4", "--execute"))
    assert committed() == [4, 2]  # clamped to the log end
    future = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)).isoformat()
    ok(ks("group", "g", "t", "--to-datetime", future, "--execute"))
    assert committed() == [10, 2]  # no record that late: the log end
    ok(ks("group", "g", "t", "--to-datetime", "2000-01-01T00:00:00", "--execute"))
    assert committed() == [0, 0]
    one_line_error(ks("group", "g", "t", "--to-datetime", "yesterday"), 2, "--to-datetime")
    one_line_error(ks("group", "g", "t", "--shift-by", "1", "--reset-offsets", "0"), 2, "exclude")
    one_line_error(ks("group", "g", "--reset-offsets", "0"), 2, "TOPIC or --all-topics")
    one_line_error(ks("group", "g", "t", "--execute"), 2, "go with a reset")
    # A group with members is refused, dry run or not, as Kafka's tool refuses it.
    consumer_member(redis_url, "g", "t")
    one_line_error(ks("group", "g", "t", "--reset-offsets", "earliest"), 1, "active members")
    one_line_error(
        ks("group", "g", "t", "--reset-offsets", "earliest", "--execute"), 1, "active members"
    )
    one_line_error(ks("group", "g", "new-t", "--shift-by", "1"), 1, "active members")


def test_every_listing_and_description_has_json(ks) -> None:  # noqa: F811
    ok(ks("create", "t", "--partitions", "2", "--config", "retention.ms=60000"))
    ok(ks("users", "add", "alice", "--password-stdin", input=b"pw\n"))
    ok(ks("acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "t"))
    ok(ks("quotas", "set", "--user", "alice", "--producer-byte-rate", "1024"))
    topics = as_json(ks("topics", "--format", "json"))
    assert isinstance(topics, list) and topics[0]["name"] == "t" and topics[0]["partitions"] == 2
    described = as_json(ks("describe", "t", "--format", "json"))
    assert isinstance(described, dict)
    assert described["topic_id"] == topics[0]["topic_id"]
    assert {"name": "retention.ms", "value": "60000", "source": "topic"} in described["configs"]
    assert [p["partition"] for p in described["partition_states"]] == [0, 1]
    brokers = as_json(ks("brokers", "--format", "json"))
    assert brokers == {"cluster_id": described["cluster_id"], "brokers": []}
    assert len(described["cluster_id"]) == 22
    # The cluster id shows in the tables too.
    assert f"cluster id  {described['cluster_id']}" in ok(ks("describe", "t")).stdout
    assert ok(ks("brokers")).stdout == f"cluster id  {described['cluster_id']}\n"
    assert as_json(ks("users", "list", "--format", "json")) == [
        {"user": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 4096}
    ]
    [acl] = as_json(ks("acls", "list", "--format", "json"))  # type: ignore[misc]
    assert acl["principal"] == "User:alice" and acl["operation"] == "READ"
    assert as_json(ks("quotas", "list", "--format", "json")) == [
        {"entity": "user=alice", "quota": "producer_byte_rate", "value": 1024.0}
    ]
    assert as_json(ks("transactions", "list", "--format", "json")) == []
    assert as_json(ks("groups", "--format", "json")) == []
    one_line_error(ks("transactions", "describe", "nope", "--format", "json"), 1, "nope")
    one_line_error(ks("topics", "--format", "yaml"), 2, "--format")


def test_a_bad_config_value_is_a_usage_error(ks) -> None:  # noqa: F811
    one_line_error(ks("create", "t", "--config", "retention.ms=abc"), 2, "--config")
    one_line_error(ks("create", "t", "--config", "no.such.config=1"), 2, "--config")
    ok(ks("create", "t"))
    one_line_error(ks("alter", "t", "--config", "retention.ms=abc"), 2, "--config")
    one_line_error(ks("alter", "t", "--delete-config", "nope"), 2, "--config")
    assert ok(ks("topics")).stdout == "t\n"
    assert "retention.ms" not in ok(ks("describe", "t")).stdout
