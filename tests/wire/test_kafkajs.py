"""kafkajs 2.2.4 (Node.js) against the server, through tests/wire/js/kafkajs_client.js:
produce with the codecs kafkajs has without plug-ins (none, gzip), fetch with explicit
partitions and offsets (kafkajs' Consumer always joins a group), admin, idempotence, and
cross-checks with the CLI."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.wire.common import (
    PARTITIONS,
    Rec,
    by_position,
    check_codec,
    cli_lines_input,
    cli_records,
    sample,
    stored_batches,
)

JS = Path(__file__).parent / "js"
NODE = shutil.which("node")
TIMEOUT = 90.0

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="Node.js is not installed"),
    pytest.mark.skipif(
        not (JS / "node_modules" / "kafkajs").is_dir(),
        reason="kafkajs is not installed: npm ci --prefix tests/wire/js",
    ),
]


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def node(broker, action: str, **command) -> object:
    """Run one scenario of kafkajs_client.js; its stderr (kafkajs' log) shows on failure."""
    payload = json.dumps({"action": action, "brokers": broker.bootstrap, **command}).encode()
    result = subprocess.run(
        [NODE, str(JS / "kafkajs_client.js")],
        input=payload,
        capture_output=True,
        timeout=TIMEOUT,
        cwd=JS,
    )
    log = result.stderr.decode(errors="replace")
    assert result.returncode == 0, f"kafkajs {action} failed:\n{log}"
    return json.loads(result.stdout)


def produce(broker, topic: str, records: list[Rec], compression: str, **options) -> None:
    messages = [
        {
            "partition": r.partition,
            "key": b64(r.key),
            "value": b64(r.value),
            "headers": [[name, b64(value)] for name, value in r.headers],
            "timestamp": r.timestamp,
        }
        for r in records
    ]
    sent = node(
        broker, "produce", topic=topic, messages=messages, compression=compression, **options
    )
    assert all(s["errorCode"] == ErrorCode.none for s in sent), sent
    first = {}
    for r in records:
        first.setdefault(r.partition, r.offset)
    assert {s["partition"]: int(s["baseOffset"]) for s in sent} == first, sent


def fetch(broker, topic: str, from_offset: int = 0) -> list[Rec]:
    out = []
    for m in node(broker, "fetch", topic=topic, fromOffset=from_offset):
        assert m["magic"] == 2 and m["timestampType"] == 0, m
        out.append(
            Rec(
                partition=m["partition"],
                offset=m["offset"],
                timestamp=m["timestamp"],
                key=unb64(m["key"]),
                value=unb64(m["value"]),
                headers=tuple((name, unb64(value)) for name, value in m["headers"]),
            )
        )
    return by_position(out)


@pytest.fixture
def sample_records() -> list[Rec]:
    """kafkajs has no null header values."""
    return sample(null_header_values=False)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_produce_and_consume(broker, topic_name, sample_records, compression):
    topic = topic_name(compression)
    broker.cli("create", topic, "--partitions", str(PARTITIONS))
    produce(broker, topic, sample_records, compression)
    assert fetch(broker, topic) == by_position(sample_records)
    check_codec(broker.bootstrap, topic, compression)
    assert cli_records(broker, topic) == by_position(sample_records)


def test_idempotent_producer(broker, topic_name, sample_records):
    from kafkaesque.records import read_header

    topic = topic_name()
    broker.cli("create", topic, "--partitions", str(PARTITIONS))
    produce(broker, topic, sample_records, "gzip", idempotent=True)
    assert fetch(broker, topic) == by_position(sample_records)
    for p in range(PARTITIONS):
        headers = [read_header(b) for b in stored_batches(broker.bootstrap, topic, p)]
        assert headers[0].producer_id >= 0, "the producer was not idempotent"
        assert headers[0].base_sequence == 0


def test_auto_created_topic(broker, topic_name):
    topic = topic_name()
    records = [Rec(0, i, 1_700_000_000_000 + i, b"k", b"auto-%d" % i) for i in range(4)]
    produce(broker, topic, records, "none")
    assert fetch(broker, topic) == records


def test_fetch_from_an_offset(broker, topic_name, sample_records):
    topic = topic_name()
    broker.cli("create", topic, "--partitions", str(PARTITIONS))
    produce(broker, topic, sample_records, "none")
    assert fetch(broker, topic, 3) == [r for r in by_position(sample_records) if r.offset >= 3]


def test_cli_produce_client_consume(broker, topic_name):
    topic = topic_name()
    broker.cli("create", topic, "--partitions", str(PARTITIONS))
    lines = cli_lines_input()
    broker.cli("produce", topic, "--key-separator", ":", input=lines)
    expected = cli_records(broker, topic)
    assert len(expected) == lines.count(b"\n")
    assert fetch(broker, topic) == expected


def test_admin(broker, topic_name):
    topic = topic_name()
    out = node(broker, "admin", topic=topic)
    assert out["created"] is True
    assert out["createdAgain"] is False  # kafkajs answers false for TOPIC_ALREADY_EXISTS
    assert out["listed"] is True
    assert out["partitions"] == [0, 1, 2]
    assert out["leaders"] == [0, 0, 0]
    assert sorted(out["offsets"]) == [[p, "0", "0"] for p in range(3)]
    assert out["configErrors"] == [0]
    assert out["configNames"], out
    assert out["brokers"] == [[0, "127.0.0.1", broker.port]]
    assert out["controller"] == 0
    assert out["partitionsAfter"] == [0, 1, 2, 3, 4]
    assert out["listedAfterDelete"] is False
    assert topic not in broker.cli("topics").stdout.decode().split()
