"""A compact topic through librdkafka: produce repeated keys and tombstones, compact (the
CLI's `compact` on the broker's Redis, or the broker's own pass), consume from the start and
get the latest value per key, tombstones until delete.retention.ms has passed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
import redis
import redis.asyncio

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.log import Log
from tests.wire.common import TIMEOUT
from tests.wire.conftest import Broker

pytest.importorskip("confluent_kafka")
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

# This module's broker does not compact by itself: the tests say when compaction runs.
BROKER_ARGS = ("--compaction-interval", "0")
PAGE_SIZE = 10
KEYS = [b"k%d" % i for i in range(4)]
Rec = tuple[int, bytes | None, bytes | None]


def create_compact_topic(broker: Broker, name: str, **configs: str) -> None:
    """Through the log on the broker's Redis (CreateTopics' configs are another change)."""

    async def create() -> None:
        log = Log(redis.asyncio.Redis.from_url(broker.redis_url))
        settings = {"cleanup.policy": "compact", "kafkaesque.page.size": str(PAGE_SIZE)}
        settings.update({k.replace("_", "."): v for k, v in configs.items()})
        await log.create_topic(TopicConfig(name, 1, configs=settings))
        await log.redis.aclose()

    asyncio.run(create())


def produce(broker: Broker, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    """Idempotently, a few records per batch (flushed every five)."""
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "broker.address.family": "v4",
            "enable.idempotence": True,
            "linger.ms": 50,
        }
    )
    for i, (key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, partition=0)
        if i % 5 == 4:
            assert producer.flush(TIMEOUT) == 0
    assert producer.flush(TIMEOUT) == 0


def consume_all(broker: Broker, topic: str) -> list[Rec]:
    """(offset, key, value) of every record from the beginning to the log end."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "broker.address.family": "v4",
            "group.id": "unused",  # assigned partitions: the group is never joined
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[Rec] = []
        deadline = time.monotonic() + TIMEOUT
        while not got or got[-1][0] < end - 1:
            assert time.monotonic() < deadline, f"consumed {got} of offsets up to {end}"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.key(), msg.value()))
        return got
    finally:
        consumer.close()


def open_page_records(broker: Broker, topic: str) -> int:
    meta = redis.Redis.from_url(broker.redis_url).hget(f"ks:{{{topic}:0}}:meta", "page_records")
    return int(meta or 0)


def history() -> list[tuple[bytes, bytes | None]]:
    """Four keys written over and over, k1 deleted, then enough other records that the
    tombstone's page closes and a later one follows it."""
    records: list[tuple[bytes, bytes | None]] = [(KEYS[i % 4], b"v%d" % i) for i in range(40)]
    records.append((KEYS[1], None))
    records += [(b"other%d" % i, b"o") for i in range(2 * PAGE_SIZE)]
    return records


def latest(records: list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes | None]:
    return dict(records)


def test_consumers_get_the_latest_value_per_key(broker: Broker, topic_name) -> None:
    topic = topic_name()
    create_compact_topic(broker, topic, delete_retention_ms="600000")
    produced = history()
    produce(broker, topic, produced)
    before = consume_all(broker, topic)
    assert len(before) == len(produced)

    done = broker.cli("compact", topic)
    assert done.stdout.decode().startswith(
        f"{topic}: {len(produced) - open_page_records(broker, topic)} -> "
    )
    after = consume_all(broker, topic)
    # Offsets keep their records: what is left is the records as they were, minus some.
    assert set(after) <= set(before) and len(after) < len(before)
    assert {k: v for _, k, v in after} == latest(produced)
    # Each key once, but for the open page (never compacted).
    keys = [k for _, k, _ in after]
    assert len(keys) <= len(latest(produced)) + open_page_records(broker, topic)
    # The tombstone stays (delete.retention.ms is ten minutes), so consumers see k1 go.
    assert [v for _, k, v in after if k == KEYS[1]] == [None]


def test_tombstones_go_after_delete_retention(broker: Broker, topic_name) -> None:
    topic = topic_name()
    create_compact_topic(broker, topic, delete_retention_ms="1500")
    produce(broker, topic, history())
    broker.cli("compact", topic)
    assert (KEYS[1], None) in [(k, v) for _, k, v in consume_all(broker, topic)]
    time.sleep(1.6)
    done = broker.cli("compact", topic)
    assert "1 of 1 partitions" in done.stdout.decode()
    assert KEYS[1] not in {k for _, k, _ in consume_all(broker, topic)}


def test_the_broker_compacts_by_itself(
    broker_factory: Callable[..., Broker], broker: Broker, topic_name
) -> None:
    """Last in the module: this second broker compacts every compact topic of the Redis."""
    topic = topic_name()
    create_compact_topic(broker, topic, delete_retention_ms="2000")
    produced = history()
    produce(broker, topic, produced)
    compacting = broker_factory("--compaction-interval", "0.2")
    deadline = time.monotonic() + TIMEOUT
    while len(got := consume_all(compacting, topic)) == len(produced):
        assert time.monotonic() < deadline, "the broker did not compact"
        time.sleep(0.2)
    assert {k: v for _, k, v in got} == latest(produced)
    while KEYS[1] in {k for _, k, _ in consume_all(compacting, topic)}:
        assert time.monotonic() < deadline, "the tombstone stayed"
        time.sleep(0.5)
