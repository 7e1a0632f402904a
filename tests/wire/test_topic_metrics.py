"""The broker's metrics per topic and group, scraped over HTTP as Prometheus would: records
and bytes in and out per topic, consumer lag falling to 0 once the group catches up, and
the archive's lag behind Redis (wire/topic_metrics.py)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import redis
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.servers import RedisServer, free_port
from tests.wire.common import TIMEOUT, create_topic, wait_until
from tests.wire.conftest import Broker


def scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=TIMEOUT) as page:
        return page.read().decode()


def value(text: str, name: str, **labels: str) -> float | None:
    """The sample ``name`` with exactly ``labels`` (in any order), None when absent."""
    for line in text.splitlines():
        found = re.fullmatch(rf"{name}(?:{{(.*)}})? (\S+)", line)
        if found is None:
            continue
        given = dict(re.findall(r'(\w+)="([^"]*)"', found.group(1) or ""))
        if given == labels:
            return float(found.group(2))
    return None


def test_topic_traffic_consumer_lag_and_archive_lag(
    redis_server: RedisServer, pg_dsn: str, tmp_path: Path
) -> None:
    redis.Redis.from_url(redis_server.url).flushall()
    address = f"127.0.0.1:{free_port()}"
    broker = Broker(
        redis_server.url,
        tmp_path / "broker",
        ("--metrics", address, "--archive-interval", "3600"),  # archives once, at start
        pg_dsn=pg_dsn,
    )
    try:
        topic, group = "metered", "lagging"
        create_topic(broker.bootstrap, topic, 2)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for i in range(100):
            producer.produce(topic, b"v%03d" % i, partition=i % 2)
        assert producer.flush(TIMEOUT) == 0

        text = scrape(address)
        assert value(text, "kafkaesque_topic_records_in_total", topic=topic) == 100
        assert (value(text, "kafkaesque_topic_bytes_in_total", topic=topic) or 0) > 100 * 4
        # Nothing archived since the records came (the next pass is an hour away).
        wait_until(
            lambda: value(scrape(address), "kafkaesque_archive_lag_records", topic=topic) == 100,
            "the archive's lag of 100 records",
        )
        assert value(scrape(address), "kafkaesque_archive_watermark") == 0  # nothing yet

        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        try:
            # A commit of 10 of partition 0's 50 records: lag 40 (a partition without a
            # committed offset has none, as kafka-consumer-groups shows "-").
            consumer.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
            wait_until(
                lambda: value(scrape(address), "kafkaesque_consumer_group_lag", group=group) == 40,
                "a group lag of 40",
                context=lambda: "\n".join(s for s in scrape(address).splitlines() if "lag" in s),
            )
            lag_0 = value(
                scrape(address), "kafkaesque_consumer_lag", group=group, topic=topic, partition="0"
            )
            assert lag_0 == 40
            # The consumer reads everything and commits: the lag falls to 0.
            consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
            read = 0
            while read < 100:
                message = consumer.poll(TIMEOUT)
                assert message is not None and message.error() is None
                read += 1
            consumer.commit(asynchronous=False)
            wait_until(
                lambda: value(scrape(address), "kafkaesque_consumer_group_lag", group=group) == 0,
                "the group's lag at 0",
            )
        finally:
            consumer.close()
        text = scrape(address)
        assert (value(text, "kafkaesque_topic_records_out_total", topic=topic) or 0) >= 100
        assert (value(text, "kafkaesque_topic_bytes_out_total", topic=topic) or 0) > 100 * 4
    finally:
        broker.stop()
