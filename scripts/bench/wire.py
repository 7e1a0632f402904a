"""Kafka clients through the wire front end, against raw Redis in the same run.

Starts a private redis-server and a `kafkaesque serve` broker, then with confluent-kafka:
produces N records of 100 bytes (acks=1, linger 5 ms) and consumes them back, printing
records/s and MB/s; then measures produce-to-consume latency at a steady 5,000 records/s
(p50/p99). The baseline is redis-py pipelining RPUSH of the same values (1,000 per call)
and LRANGE (1,000 per call) against the same redis-server.

    python scripts/bench/wire.py [--records N] [--latency-seconds S]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import redis
from broker_process import FAST_CONSUMER, VALUE, broker_on_embedded_redis, consume, produce
from confluent_kafka import Consumer, Producer, TopicPartition


def latency(bootstrap: str, topic: str, seconds: float, rate: int = 5000) -> list[float]:
    """Send `rate` records/s carrying their send time; a consumer thread records arrival."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "lat",
            "fetch.wait.max.ms": 100,
            "fetch.min.bytes": 1,
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1})  # client defaults: linger 5 ms
    # Warm up: the topic exists and the consumer has fetched once before we measure.
    producer.produce(topic, b"warm-up", partition=0)
    producer.flush(10)
    consumer.assign([TopicPartition(topic, 0, 0)])
    while (message := consumer.poll(5)) is None or message.error() is not None:
        pass
    samples: list[float] = []
    total = int(seconds * rate)
    done = threading.Event()

    def receive() -> None:
        while len(samples) < total and not done.is_set():
            # poll, not consume(n): consume waits until n messages or its timeout.
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                sent = int.from_bytes(message.value()[:8], "big")
                samples.append((time.perf_counter_ns() - sent) / 1e6)

    thread = threading.Thread(target=receive)
    thread.start()
    started = time.perf_counter()
    for i in range(total):
        target = started + i / rate
        while (delay := target - time.perf_counter()) > 0:
            time.sleep(min(delay, 0.001))
        producer.produce(topic, time.perf_counter_ns().to_bytes(8, "big") + VALUE[8:], partition=0)
        producer.poll(0)
    producer.flush(30)
    thread.join(30)
    done.set()
    consumer.close()
    return samples


def baseline(url: str, n: int) -> tuple[float, float]:
    r = redis.Redis.from_url(url)
    started = time.perf_counter()
    pipe = r.pipeline(transaction=False)
    for i in range(0, n, 1000):
        pipe.rpush("raw", *([VALUE] * min(1000, n - i)))
        if i % 50_000 == 0:
            pipe.execute()
    pipe.execute()
    produce_s = time.perf_counter() - started
    started = time.perf_counter()
    got = 0
    for i in range(0, n, 1000):
        got += len(r.lrange("raw", i, i + 999))
    consume_s = time.perf_counter() - started
    assert got == n
    r.delete("raw")
    return produce_s, consume_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    args = parser.parse_args()
    n = args.records
    with broker_on_embedded_redis() as (bootstrap, url):
        produce_s = produce(bootstrap, "bench", n)
        consume_s = consume(bootstrap, "bench", n)
        fast_consume_s = consume(bootstrap, "bench", n, FAST_CONSUMER)
        samples = latency(bootstrap, "latency", args.latency_seconds)
        raw_produce_s, raw_consume_s = baseline(url, n)
    mb = n * len(VALUE) / 1e6
    print(
        f"{n} records of {len(VALUE)} bytes, confluent-kafka <-> kafkaesque serve <-> redis-server"
    )
    print(f"(cpus: {os.cpu_count()}; client, broker and Redis share them)")
    for name, ours, raw in (
        ("produce", produce_s, raw_produce_s),
        ("consume (client defaults)", consume_s, raw_consume_s),
        ("consume (fetch.queue.backoff.ms=50)", fast_consume_s, raw_consume_s),
    ):
        print(
            f"{name + ':':<38}{n / ours:>10,.0f} records/s {mb / ours:>7.1f} MB/s"
            f"   raw Redis {n / raw:>10,.0f} records/s   ratio {raw / ours:.2f}"
        )
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[int(len(samples) * 0.99) - 1]
    print(
        f"latency at 5,000 records/s: p50 {p50:.2f} ms  p99 {p99:.2f} ms  ({len(samples)} samples)"
    )


if __name__ == "__main__":
    main()
