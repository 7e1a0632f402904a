"""Topic configs enforced on produce, seen through real clients: LogAppendTime stamps,
compacted topics refusing keyless records, a topic's max.message.bytes, a topic codec and
CreateTime bounds. The topics are created with their configs directly in the broker's
Redis (``Log.create_topic``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis.asyncio
from kio.schema.errors import ErrorCode

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.log import Log
from kafkaesque.records.batch import Compression, check_batch
from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection
from tests.wire.common import BASE_TIMESTAMP, TIMEOUT

pytest.importorskip("confluent_kafka")
import confluent_kafka
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from tests.wire.clients.confluent import Logs, base_config

T = TypeVar("T")


def now_ms() -> int:
    return int(time.time() * 1000)


def on_log(broker: Any, use: Callable[[Log], Awaitable[T]]) -> T:
    """``use`` applied to a Log on the broker's Redis."""

    async def run() -> T:
        client = redis.asyncio.Redis.from_url(broker.redis_url)
        try:
            return await use(Log(client))
        finally:
            await client.aclose()

    return asyncio.run(run())


def create(broker: Any, topic: str, configs: dict[str, str] | None = None) -> str:
    """Create ``topic`` (one partition) with ``configs``."""
    config = TopicConfig(topic, 1, configs=configs)
    on_log(broker, lambda log: log.create_topic(config))
    return topic


def stored(broker: Any, topic: str) -> list[bytes]:
    """The topic's batches as Redis holds them."""

    async def read(log: Log) -> list[bytes]:
        return (await log.read(topic, 0, 0)).batches

    return on_log(broker, read)


def produce(broker: Any, topic: str, values: list[tuple[bytes | None, bytes]], **config: Any):
    """Produce (key, value) records with confluent-kafka; the delivery reports' (error,
    message) in order, and the client's log."""
    logs = Logs()
    producer = Producer(
        {
            **base_config(broker.bootstrap, logs),
            "linger.ms": 20,
            "message.timeout.ms": int(TIMEOUT * 1000),
            **config,
        }
    )
    reports: list[tuple[KafkaError | None, Any]] = []
    for key, value in values:
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=0,
            timestamp=BASE_TIMESTAMP,
            on_delivery=lambda err, msg: reports.append((err, msg)),
        )
    assert producer.flush(TIMEOUT) == 0, f"not delivered; log:\n{logs}"
    return reports, logs


def consume(broker: Any, topic: str, count: int) -> list[Any]:
    """``count`` messages of partition 0 from the start, with confluent-kafka."""
    logs = Logs()
    consumer = Consumer(
        {
            **base_config(broker.bootstrap, logs),
            "group.id": "unused",  # required by the binding; no group is joined
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        messages: list[Any] = []
        deadline = time.monotonic() + TIMEOUT
        while len(messages) < count and time.monotonic() < deadline:
            for m in consumer.consume(count - len(messages), 0.5):
                assert m.error() is None, f"{m.error()}; log:\n{logs}"
                messages.append(m)
        assert len(messages) == count, f"got {len(messages)} of {count}; log:\n{logs}"
        return messages
    finally:
        consumer.close()


def test_log_append_time_reaches_producers_and_consumers(broker, topic_name):
    topic = create(broker, topic_name(), {"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    reports, logs = produce(broker, topic, [(b"k", b"v1"), (None, b"v2")])
    after = now_ms()
    assert [err for err, _ in reports] == [None, None], f"log:\n{logs}"
    for _, msg in reports:  # the produce response's log_append_time_ms
        kind, timestamp = msg.timestamp()
        assert kind == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME, f"log:\n{logs}"
        assert before <= timestamp <= after
    messages = consume(broker, topic, 2)
    assert [m.value() for m in messages] == [b"v1", b"v2"]
    for m in messages:
        kind, timestamp = m.timestamp()
        assert kind == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME
        assert before <= timestamp <= after  # the broker's clock, not BASE_TIMESTAMP
    # The CLI's consumer shows the same.
    printed = broker.cli("consume", topic, "--format", "json").stdout.decode()
    assert f'"timestamp": {messages[0].timestamp()[1]}' in printed


def test_produce_response_carries_log_append_time(broker, topic_name):
    stamped = create(broker, topic_name(), {"message.timestamp.type": "LogAppendTime"})
    plain = create(broker, topic_name())
    with Connection(broker.bootstrap) as conn:
        before = now_ms()
        answer = conn.produce(stamped, 0, build_batch([b"x"], timestamp=BASE_TIMESTAMP))
        after = now_ms()
        assert answer.error_code == ErrorCode.none, answer
        assert before <= round(answer.log_append_time.timestamp() * 1000) <= after
        answer = conn.produce(plain, 0, build_batch([b"x"], timestamp=BASE_TIMESTAMP))
        assert answer.error_code == ErrorCode.none and answer.log_append_time is None, answer


def test_compacted_topic_refuses_records_without_key(broker, topic_name):
    topic = create(broker, topic_name(), {"cleanup.policy": "compact"})
    reports, logs = produce(broker, topic, [(None, b"no key")])
    [(err, _)] = reports
    assert err is not None and err.code() == KafkaError.INVALID_RECORD, f"{err}; log:\n{logs}"
    reports, logs = produce(broker, topic, [(b"key", b"value")])
    assert [err for err, _ in reports] == [None], f"log:\n{logs}"
    assert [m.key() for m in consume(broker, topic, 1)] == [b"key"]


def test_topic_max_message_bytes(broker, topic_name):
    limited = create(broker, topic_name(), {"max.message.bytes": "1000"})
    plain = create(broker, topic_name())
    reports, logs = produce(broker, limited, [(None, b"x" * 2000)])
    [(err, _)] = reports
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, f"{err}; {logs}"
    for topic in (limited, plain):
        value = b"x" * (100 if topic == limited else 2000)
        reports, logs = produce(broker, topic, [(None, value)])
        assert [err for err, _ in reports] == [None], f"{topic}; log:\n{logs}"


@pytest.mark.parametrize("codec", ["zstd", "gzip"])
def test_topic_codec_recompresses_what_clients_send(broker, topic_name, codec):
    topic = create(broker, topic_name(), {"compression.type": codec})
    values = [b"record %d, compressible: " % i + b"abc" * 50 for i in range(20)]
    reports, logs = produce(
        broker, topic, [(None, v) for v in values], **{"compression.type": "none"}
    )
    assert all(err is None for err, _ in reports), f"log:\n{logs}"
    assert [m.value() for m in consume(broker, topic, 20)] == values
    batches = stored(broker, topic)
    assert batches
    assert {check_batch(b).compression for b in batches} == {Compression.parse(codec)}


def test_create_time_bounds_refuse_with_invalid_timestamp(broker, topic_name):
    topic = create(broker, topic_name(), {"message.timestamp.before.max.ms": "3600000"})
    with Connection(broker.bootstrap) as conn:
        old = build_batch([b"old"], timestamp=BASE_TIMESTAMP)
        answer = conn.produce(topic, 0, old)
        assert answer.error_code == ErrorCode.invalid_timestamp, answer
        answer = conn.produce(topic, 0, build_batch([b"now"]))
        assert answer.error_code == ErrorCode.none and answer.base_offset == 0, answer
