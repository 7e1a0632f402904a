"""Transactions as consumers see them over the wire: Fetch and ListOffsets under
READ_COMMITTED (the last stable offset, the aborted transactions), DescribeProducers' open
transactions, and real consumers (confluent-kafka) with isolation.level read_committed and
read_uncommitted. Transactional batches are appended and markers written through the log
(kafkaesque.partition.layer), as the transaction coordinator does; the broker is a real server."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest
import redis.asyncio
from kio.schema.errors import ErrorCode

from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import Partitions
from kafkaesque.records.batch import decode_batch, is_control, read_header, split_batches
from kafkaesque.records.build import build_batch, build_control_batch
from kafkaesque.txn.transaction import TxnMarker
from tests.kafka_client import Connection, list_offsets_request, request
from tests.wire.common import TIMEOUT

A, B, C = 5001, 5002, 5003  # producer ids


def txn(values: list[bytes], pid: int, seq: int = 0) -> bytes:
    return build_batch(
        values, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True
    )


async def on_log(redis_url: str, work: Any) -> Any:
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        return await work(Partitions(Log(client)))
    finally:
        await client.aclose()


def setup(broker: Any, topic: str) -> None:
    """Offsets 0 p0 | 1-2 A's a0 a1 (aborted at 5) | 3 B's b0 (committed at 6) | 4 p1 |
    5 ABORT A | 6 COMMIT B | 7 p2 | 8 C's c0 (open) | 9 p3."""

    async def work(parts: Partitions) -> None:
        log = parts.log
        await log.append(topic, 0, [build_batch([b"p0"])])
        await log.append(topic, 0, [txn([b"a0", b"a1"], A)])
        await log.append(topic, 0, [txn([b"b0"], B)])
        await log.append(topic, 0, [build_batch([b"p1"])])
        assert await parts.write_markers([(topic, 0)], TxnMarker(A, 0, commit=False)) == {
            (topic, 0): None
        }
        assert await parts.write_markers([(topic, 0)], TxnMarker(B, 0, commit=True)) == {
            (topic, 0): None
        }
        await log.append(topic, 0, [build_batch([b"p2"])])
        await log.append(topic, 0, [txn([b"c0"], C)])
        await log.append(topic, 0, [build_batch([b"p3"])])

    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
    asyncio.run(on_log(broker.redis_url, work))


def fetch(
    conn: Connection, topic: str, offset: int, isolation: int, wait_ms: int = 0, version: int = 11
) -> Any:
    req = request(
        1,
        version,
        max_wait=wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=isolation,
        topics=[
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
        forgotten_topics_data=(),
    )
    [t] = conn.request(req).responses
    [p] = t.partitions
    return p


def user_values(records: bytes) -> list[bytes | None]:
    return [
        r.value for b in split_batches_any(records) for r in decode_batch(b) if not is_control(b)
    ]


def split_batches_any(records: bytes) -> list[bytes]:
    """The batches of a fetch response, markers included (split_batches refuses them)."""
    out, pos = [], 0
    while pos < len(records):
        length = read_header(records, pos).length
        out.append(records[pos : pos + length])
        pos += length
    return out


def latest(conn: Connection, topic: str, isolation: int) -> int:
    req = list_offsets_request(topic, 0, -1)
    req = dataclasses.replace(req, isolation_level=isolation)
    [t] = conn.request(req).topics
    [p] = t.partitions
    assert p.error_code == ErrorCode.none
    return p.offset


def test_fetch_read_committed_and_uncommitted(broker, topic_name):
    topic = topic_name()
    setup(broker, topic)
    with Connection(broker.bootstrap) as conn:
        for version in (4, 11, 12):
            committed = fetch(conn, topic, 0, isolation=1, version=version)
            assert committed.error_code == ErrorCode.none
            assert (committed.high_watermark, committed.last_stable_offset) == (10, 8)
            assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [
                (A, 1)
            ]
            batches = split_batches_any(committed.records)
            assert [read_header(b).base_offset for b in batches] == [0, 1, 3, 4, 5, 6, 7]
            everything = fetch(conn, topic, 0, isolation=0, version=version)
            assert (everything.high_watermark, everything.last_stable_offset) == (10, 8)
            assert list(everything.aborted_transactions) == []
            assert user_values(everything.records) == [
                b"p0", b"a0", b"a1", b"b0", b"p1", b"p2", b"c0", b"p3"
            ]  # fmt: skip
        # From past the aborted transaction: none to report.
        assert list(fetch(conn, topic, 7, isolation=1).aborted_transactions) == []
        # At the last stable offset: nothing yet, no error.
        at_lso = fetch(conn, topic, 8, isolation=1)
        assert at_lso.error_code == ErrorCode.none and at_lso.records in (None, b"")
        assert latest(conn, topic, 1) == 8
        assert latest(conn, topic, 0) == 10


def test_read_committed_long_poll_wakes_on_the_marker(broker, topic_name):
    topic = topic_name()
    setup(broker, topic)
    with Connection(broker.bootstrap, timeout=60) as conn:
        req = request(
            1,
            11,
            max_wait=30_000,
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=1,
            topics=[
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 8, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
            forgotten_topics_data=(),
        )
        correlation = conn.send_request(req)
        # A plain append past the LSO does not wake it with records: they are not stable.
        asyncio.run(
            on_log(broker.redis_url, lambda p: p.log.append(topic, 0, [build_batch([b"p4"])]))
        )
        outcome = asyncio.run(
            on_log(
                broker.redis_url,
                lambda p: p.write_markers([(topic, 0)], TxnMarker(C, 0, commit=True)),
            )
        )
        assert outcome == {(topic, 0): None}
        [t] = conn.read_response(req, correlation).responses
        [p] = t.partitions
        # Only the marker's wake-up can bring these before the 30 s wait ends (after which
        # the fetch answers what it read first: nothing).
        assert user_values(p.records) == [b"c0", b"p3", b"p4"]
        assert p.last_stable_offset == p.high_watermark == 12


def test_describe_producers_shows_open_transactions(broker, topic_name):
    topic = topic_name()
    setup(broker, topic)
    with Connection(broker.bootstrap) as conn:
        resp = conn.request(request(61, 0, topics=[{"name": topic, "partition_indexes": [0, 7]}]))
        [t] = resp.topics
        by_index = {p.partition_index: p for p in t.partitions}
        assert by_index[7].error_code == ErrorCode.unknown_topic_or_partition
        starts = {s.producer_id: s.current_txn_start_offset for s in by_index[0].active_producers}
        assert starts == {A: -1, B: -1, C: 8}


def test_clients_cannot_write_markers_or_anonymous_transactions(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
        # Transactional records without a transactional id (a marker is one), as Kafka
        # answers; the log refuses both too (tests/test_transactions_log.py).
        refused = ErrorCode.transactional_id_authorization_failed
        marker = build_control_batch(A, 0, commit=True)
        assert conn.produce(topic, 0, marker).error_code == refused
        anonymous = build_batch([b"x"], transactional=True)
        assert conn.produce(topic, 0, anonymous).error_code == refused
        assert conn.list_offset(topic, 0, -1).offset == 0
        with pytest.raises(Exception, match="control"):
            split_batches(marker)


def consume(broker: Any, topic: str, isolation: str, expected: int) -> list[bytes]:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"{topic}-{isolation}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
        # Nothing more comes (a short look: what is visible was all fetched by now).
        extra = consumer.poll(2.0)
        if extra is not None and extra.error() is None:
            values.append(extra.value())
    finally:
        consumer.close()
    return values


def test_confluent_read_committed_sees_only_committed_records(broker, topic_name):
    topic = topic_name()
    setup(broker, topic)
    assert consume(broker, topic, "read_committed", 4) == [b"p0", b"b0", b"p1", b"p2"]
    assert consume(broker, topic, "read_uncommitted", 8) == [
        b"p0", b"a0", b"a1", b"b0", b"p1", b"p2", b"c0", b"p3"
    ]  # fmt: skip


def test_kafka_python_and_aiokafka_read_committed(broker, topic_name):
    topic = topic_name()
    setup(broker, topic)
    kafka = pytest.importorskip("kafka")
    for isolation, expected in (
        ("read_committed", [b"p0", b"b0", b"p1", b"p2"]),
        ("read_uncommitted", [b"p0", b"a0", b"a1", b"b0", b"p1", b"p2", b"c0", b"p3"]),
    ):
        consumer = kafka.KafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            isolation_level=isolation,
        )
        try:
            got: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT
            while len(got) < len(expected) and time.monotonic() < deadline:
                got += [m.value for ms in consumer.poll(timeout_ms=500).values() for m in ms]
            got += [m.value for ms in consumer.poll(timeout_ms=1000).values() for m in ms]
            assert got == expected, isolation  # and nothing more within a second
        finally:
            consumer.close()

    aiokafka = pytest.importorskip("aiokafka")

    async def read(isolation: str) -> list[bytes]:
        consumer = aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            isolation_level=isolation,
        )
        await consumer.start()
        try:
            values: list[bytes] = []
            while True:
                batch = await consumer.getmany(timeout_ms=2000)
                if not batch:
                    return values
                values += [m.value for msgs in batch.values() for m in msgs]
        finally:
            await consumer.stop()

    assert asyncio.run(read("read_committed")) == [b"p0", b"b0", b"p1", b"p2"]
    assert asyncio.run(read("read_uncommitted")) == [
        b"p0", b"a0", b"a1", b"b0", b"p1", b"p2", b"c0", b"p3"
    ]  # fmt: skip
