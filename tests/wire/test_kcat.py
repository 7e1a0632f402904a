"""kcat (librdkafka 2.0.2 from Debian) against the server: produce with every codec, consume
(-C -e, manual assignment), metadata listing (-L), the word list, and cross-checks with the
CLI (consuming what the CLI produced: test_clients.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.wire.clients import needs
from tests.wire.clients.kcat import kcat, kcat_consume
from tests.wire.common import CODECS, PARTITIONS, Rec, check_codec, cli_records, recent

WORDS = Path("/usr/share/dict/words")

pytestmark = needs("kcat")


FILLER = "-the-quick-brown-fox-jumps-over-the-lazy-dog" * 6


def lines_for(partition: int) -> tuple[bytes, list[tuple[bytes | None, bytes]]]:
    """Input for ``kcat -P -K :`` and the (key, value) pairs it stands for: keys, empty keys
    (a line starting with the separator) and empty values; no -Z, so empty stays empty."""
    pairs: list[tuple[bytes | None, bytes]] = [
        (b"key-%d" % partition, b"value-%d%s" % (partition, FILLER.encode())),
        (b"", b"empty-key%s" % FILLER.encode()),
        (b"key-empty-value", b""),
        (b"k", b"value:with:colons%s" % FILLER.encode()),
    ]
    text = b"".join(k + b":" + v + b"\n" for k, v in pairs)
    return text, pairs


def produce_lines(broker, topic: str, compression: str) -> list[Rec]:
    """Produce to each partition with headers; returns the records expected (timestamps 0:
    kcat cannot set them, the tests check they are recent instead)."""
    expected = []
    for p in range(PARTITIONS):
        text, pairs = lines_for(p)
        kcat(
            broker,
            "-P",
            "-t",
            topic,
            "-p",
            str(p),
            "-K",
            ":",
            "-z",
            compression,
            "-H",
            "origin=kcat",
            "-H",
            "empty=",
            "-X",
            "linger.ms=100",
            input=text,
        )
        headers = (("origin", b"kcat"), ("empty", b""))
        expected += [Rec(p, i, 0, k, v, headers) for i, (k, v) in enumerate(pairs)]
    return expected


def without_timestamps(records: list[Rec]) -> list[Rec]:
    assert all(recent(r.timestamp) for r in records), [r.timestamp for r in records]
    return [Rec(r.partition, r.offset, 0, r.key, r.value, r.headers) for r in records]


@pytest.mark.parametrize("compression", CODECS)
def test_produce_and_consume(broker, topic_name, compression):
    topic = topic_name(compression)
    broker.cli("create", topic, "--partitions", str(PARTITIONS))
    expected = produce_lines(broker, topic, compression)
    consumed = kcat_consume(broker, topic)
    assert without_timestamps(consumed) == expected
    check_codec(broker.bootstrap, topic, compression, librdkafka=True)
    # The CLI reads exactly what kcat reads, timestamps included.
    assert cli_records(broker, topic) == consumed


def test_null_key_and_value(broker, topic_name):
    """With -Z, empty keys and values are sent as null."""
    topic = topic_name()
    broker.cli("create", topic)
    kcat(broker, "-P", "-t", topic, "-K", ":", "-Z", input=b"k:\n:v\nnokey\n")
    consumed = without_timestamps(kcat_consume(broker, topic))
    assert [(r.key, r.value) for r in consumed] == [(b"k", None), (None, b"v"), (None, b"nokey")]
    assert without_timestamps(cli_records(broker, topic)) == consumed


def test_consume_one_partition_from_an_offset(broker, topic_name):
    topic = topic_name()
    broker.cli("create", topic, "--partitions", str(PARTITIONS))
    expected = produce_lines(broker, topic, "none")
    out = kcat(broker, "-C", "-t", topic, "-p", "1", "-o", "2", "-e", "-q", "-f", "%o %s\n")
    wanted = [r for r in expected if r.partition == 1 and r.offset >= 2]
    assert out.stdout.decode().splitlines() == [f"{r.offset} {r.value.decode()}" for r in wanted]


def test_metadata_listing(broker, topic_name):
    topic = topic_name()
    broker.cli("create", topic, "--partitions", "4")
    meta = json.loads(kcat(broker, "-L", "-J").stdout)
    assert meta["controllerid"] == 0
    assert [(b["id"], b["name"]) for b in meta["brokers"]] == [(0, broker.bootstrap)]
    topics = {t["topic"]: t for t in meta["topics"]}
    assert topic in topics
    partitions = topics[topic]["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1, 2, 3]
    assert all(p["leader"] == 0 and "error" not in p for p in partitions), partitions

    one = json.loads(kcat(broker, "-L", "-J", "-t", topic).stdout)
    assert [t["topic"] for t in one["topics"]] == [topic]


@pytest.mark.skipif(not WORDS.exists(), reason="no /usr/share/dict/words (wamerican)")
def test_word_list_round_trip(broker, topic_name):
    topic = topic_name()
    words = WORDS.read_bytes()
    count = words.count(b"\n")
    kcat(broker, "-P", "-t", topic, "-l", str(WORDS))
    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-q").stdout
    assert out.count(b"\n") == count
    assert out == words
    values = broker.cli("consume", topic).stdout
    assert values == words
