"""A `kafkaesque serve` subprocess for the benchmarks, and a confluent-kafka producer and
consumer."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from kafkaesque.hot.embedded import EmbeddedRedis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(
    redis_url: str, port: int, pg_dsn: str | None = None, extra: Sequence[str] = ()
) -> subprocess.Popen:
    """Start a broker on 127.0.0.1:``port`` against ``redis_url`` and wait until it listens.
    Without ``pg_dsn`` it does not archive, so nothing but the measured traffic runs; with
    it, it reads old offsets from that archive (and archives only once an hour). ``extra``:
    more ``serve`` options."""
    command = [sys.executable, "-m", "kafkaesque", "--redis-url", redis_url]
    command += ["--pg-dsn", pg_dsn, "serve", "--archive-interval", "3600"] if pg_dsn else ["serve"]
    command += ["--listen", f"127.0.0.1:{port}"] + ([] if pg_dsn else ["--no-archive"])
    command += extra
    proc = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60  # a loaded machine imports slowly
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError("broker did not start")


@contextlib.contextmanager
def running_broker(redis_url: str, pg_dsn: str | None = None) -> Iterator[str]:
    """A broker (see `start_broker`) on a free port for the block; yields its bootstrap."""
    port = free_port()
    broker = start_broker(redis_url, port, pg_dsn)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        broker.terminate()
        broker.wait(10)


@contextlib.contextmanager
def broker_on_embedded_redis() -> Iterator[tuple[str, str]]:
    """A fresh redis-server in a temporary directory and a broker on it for the block;
    yields (bootstrap, redis_url)."""
    with tempfile.TemporaryDirectory(prefix="ks-bench-") as home:
        server = EmbeddedRedis(Path(home))
        try:
            url = server.ensure_started()
            with running_broker(url) as bootstrap:
                yield bootstrap, url
        finally:
            server.stop()


# librdkafka stops fetching for fetch.queue.backoff.ms (default 1000) whenever its prefetch
# queue holds queued.min.messages (default 100,000): a consumer that drains 100,000 records
# in a tenth of a second then idles for most of a second, whatever the broker (Kafka too).
# Measured here: 0.37M records/s with the defaults, 1.6M with a 50 ms backoff.
FAST_CONSUMER = {"fetch.queue.backoff.ms": 50}
VALUE = b"v" * 100


def produce(
    bootstrap: str,
    topic: str,
    n: int,
    partitions: int = 1,
    acks: str = "1",
    idempotent: bool = False,
    config: dict[str, object] | None = None,
) -> float:
    """Seconds a confluent-kafka producer (acks=1, linger 5 ms, big batches, not idempotent
    unless asked; updated with ``config``) takes to deliver ``n`` records of 100 bytes,
    spread round-robin over ``partitions``."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "enable.idempotence": idempotent,
            **(config or {}),
        }
    )
    started = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, VALUE, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(120)
    assert remaining == 0, f"{remaining} records not delivered"
    return time.perf_counter() - started


def consume(bootstrap: str, topic: str, n: int, config: dict[str, object] | None = None) -> float:
    """Seconds a confluent-kafka consumer (librdkafka's defaults, updated with ``config``)
    takes to read ``n`` records of partition 0 from offset 0."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            **(config or {}),
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    while got < n:
        for message in consumer.consume(10_000, timeout=5):
            assert message.error() is None, message.error()
            got += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed
