"""The command line's wire mode against a broker that is not kafkaesque: librdkafka's
mock cluster (in this process; the CLI reaches it over loopback). It has no CreateTopics,
DescribeGroups, ListGroups or DeleteGroups: topics come into being as they are produced
to, a group is described from its committed offsets, and what the mock cannot do is one
line, exit 1. Also the wire mode's usage errors and an unreachable broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.wire.cli_wire import (
    as_json,
    json_lines,
    ok,
    one_line_error,
    values,
    wire,
    write_config,
)

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def mock_bootstrap() -> Iterator[str]:
    """librdkafka's mock cluster of one broker, for the module: its host:port."""
    holder = confluent_kafka.Producer({"test.mock.num.brokers": 1, "log_level": 0})
    broker = next(iter(holder.list_topics(timeout=10).brokers.values()))
    yield f"{broker.host}:{broker.port}"
    holder.flush(1)


def mock_topic(bootstrap: str, name: str) -> str:
    """A topic of the mock cluster (it has no CreateTopics: a producer's Metadata request
    creates it, with 4 partitions)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    producer.list_topics(name, timeout=10)
    return name


def test_produce_consume_topics_and_group_on_the_mock(mock_bootstrap: str, tmp_path: Path) -> None:
    topic, group = mock_topic(mock_bootstrap, "mock-topic"), "mock-group"
    # The mock keeps a member that left for its session: the second read's join would
    # wait out the first's (the CLI's 10 s), 3 s with this.
    short = write_config(tmp_path / "short.properties", {"session.timeout.ms": "3000"})
    lines = b"".join(b"k%d\tv%d\n" % (i, i) for i in range(20))
    ok(wire(mock_bootstrap, "produce", topic, "--key-separator", "\t", input=lines))
    assert topic in ok(wire(mock_bootstrap, "topics")).split()
    listed = as_json(wire(mock_bootstrap, "topics", "--format", "json"))
    partitions = next(t["partitions"] for t in listed if t["name"] == topic)
    assert partitions >= 1
    records = json_lines(
        ok(
            wire(
                mock_bootstrap, "consume", topic, "--group", group, "--format", "json", config=short
            )
        )
    )
    assert values(records) == sorted(f"v{i}" for i in range(20))
    # the group read everything: a second read of it prints nothing
    assert ok(wire(mock_bootstrap, "consume", topic, "--group", group, config=short)) == ""
    described = wire(mock_bootstrap, "group", group, "--format", "json")
    document = as_json(described)
    assert document["group"] == group
    assert sum(row["current_offset"] for row in document["offsets"]) == 20
    assert all(row["lag"] == 0 for row in document["offsets"])
    assert "DescribeGroups" in described.stderr.decode()  # state and members unknown
    one_line_error(wire(mock_bootstrap, "group", group, "--delete"), 1, "UNSUPPORTED_FEATURE")
    one_line_error(wire(mock_bootstrap, "group", "nobody-here"), 1, "no such group")
    one_line_error(wire(mock_bootstrap, "create", "other"), 1, "controller")
    one_line_error(
        wire(mock_bootstrap, "produce", "absent", input=b"x\n"), 1, "no such topic: absent"
    )


def test_start_options_over_the_wire(mock_bootstrap: str) -> None:
    topic = mock_topic(mock_bootstrap, "mock-starts")
    lines = b"".join(b"v%d\n" % i for i in range(10))
    ok(wire(mock_bootstrap, "produce", topic, "--partition", "0", input=lines))
    last = ok(wire(mock_bootstrap, "consume", topic, "--partition", "0", "--last", "3"))
    assert last.split() == ["v7", "v8", "v9"]
    offset = ok(wire(mock_bootstrap, "consume", topic, "--partition", "0", "--offset", "8"))
    assert offset.split() == ["v8", "v9"]
    assert ok(wire(mock_bootstrap, "consume", topic, "--from-end")) == ""
    limited = wire(mock_bootstrap, "consume", topic, "--partition", "0", "--max-records", "2")
    assert ok(limited).split() == ["v0", "v1"]
    formatted = ok(
        wire(mock_bootstrap, "consume", topic, "--partition", "0", "--format-string", "%p:%o:%s,")
    )
    assert formatted.startswith("0:0:v0,0:1:v1,")


def test_commands_without_a_wire_form_are_usage_errors() -> None:
    for args in (["serve"], ["archive", "--once"], ["stop"], ["compact"], ["spark", "report"]):
        one_line_error(wire("127.0.0.1:9", *args), 2, "no wire form")
    one_line_error(wire("127.0.0.1:9", "consume", "t", "--on-truncation", "rewind"), 2, "wire")
    one_line_error(wire("no-port", "topics"), 2, "HOST:PORT")


def test_an_unreachable_broker_is_one_line() -> None:
    result = wire("127.0.0.1:1", "topics")
    one_line_error(result, 1, "cannot reach 127.0.0.1:1", "connection refused")


def test_keys_headers_and_nulls_over_the_wire(mock_bootstrap: str) -> None:
    topic = mock_topic(mock_bootstrap, "mock-headers")
    lines = b"k1:NULL\nk2:v2\n"
    produce = ["produce", topic, "--key-separator", ":", "--null-marker", "NULL"]
    ok(wire(mock_bootstrap, *produce, "--header", "h=1", "--partition", "1", input=lines))
    records = json_lines(ok(wire(mock_bootstrap, "consume", topic, "--format", "json")))
    assert [(r["partition"], r["key"], r["value"]) for r in records] == [
        (1, "k1", None),
        (1, "k2", "v2"),
    ]
    assert all(r["headers"] == [{"key": "h", "value": "1"}] for r in records)
    json_input = b'{"key": "j", "value": "w", "partition": 2, "headers": {"a": "b"}}\n'
    ok(wire(mock_bootstrap, "produce", topic, "--format", "json", input=json_input))
    got = json_lines(
        ok(wire(mock_bootstrap, "consume", topic, "--partition", "2", "--format", "json"))
    )
    assert [(r["key"], r["value"], r["headers"]) for r in got] == [
        ("j", "w", [{"key": "a", "value": "b"}])
    ]
    bad = wire(
        mock_bootstrap, "produce", topic, "--format", "json", input=b'{"value": "x"}\nnope\n'
    )
    one_line_error(bad, 1, "line 2")
