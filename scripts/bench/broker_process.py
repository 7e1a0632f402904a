"""A `kafkaesque serve` subprocess for the benchmarks, and a confluent-kafka producer and
consumer."""

from __future__ import annotations

import contextlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis
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
    return wait_listening(subprocess.Popen(command, stderr=subprocess.DEVNULL), port, "broker")


def wait_listening(proc: subprocess.Popen, port: int, what: str) -> subprocess.Popen:
    """``proc`` once it listens on 127.0.0.1:``port``; killed, and RuntimeError naming
    ``what``, if it exits first or takes over a minute (a loaded machine imports slowly)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"the {what} did not start")


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


@dataclass(frozen=True)
class BrokerOnRedis:
    """A running broker on its own redis-server: where to reach them, and their pids (for
    CPU figures from /proc: scripts/bench/proc_cpu.py)."""

    bootstrap: str
    redis_url: str
    broker_pid: int
    redis_pid: int

    def pids(self) -> dict[str, int | None]:
        """The processes to measure: the broker, Redis, and this one (the client)."""
        return {"broker": self.broker_pid, "redis": self.redis_pid, "client": None}


@contextlib.contextmanager
def embedded_broker(appendfsync: str | None = None) -> Iterator[BrokerOnRedis]:
    """A fresh redis-server in a temporary directory (appendfsync always, unless
    ``appendfsync`` says otherwise: the broker probes it at start) and a broker on it."""
    with tempfile.TemporaryDirectory(prefix="ks-bench-") as home:
        server = EmbeddedRedis(Path(home))
        try:
            url = server.ensure_started()
            if appendfsync is not None:
                redis.Redis.from_url(url).config_set("appendfsync", appendfsync)
            port = free_port()
            broker = start_broker(url, port)
            try:
                yield BrokerOnRedis(f"127.0.0.1:{port}", url, broker.pid, server.pid() or 0)
            finally:
                broker.terminate()
                broker.wait(10)
        finally:
            server.stop()


@contextlib.contextmanager
def broker_on_embedded_redis() -> Iterator[tuple[str, str]]:
    """A fresh redis-server in a temporary directory and a broker on it for the block;
    yields (bootstrap, redis_url)."""
    with embedded_broker() as running:
        yield running.bootstrap, running.redis_url


def durable_write_ms(redis_url: str, writes: int = 200) -> float:
    """The median round trip of one small write (SET) on this Redis: under appendfsync
    always Redis answers once it is fsynced, so this is the least any request that writes
    waits before its answer (Redis' own cost, whatever the broker does)."""
    client = redis.Redis.from_url(redis_url)
    times = []
    for i in range(writes):
        started = time.perf_counter()
        client.set("bench:durable-write", i)
        times.append(time.perf_counter() - started)
    client.delete("bench:durable-write")
    return statistics.median(times) * 1000


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
    spread round-robin over ``partitions``. A record the broker refused fails it."""
    failed: list[object] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "enable.idempotence": idempotent,
            # Only failures are reported: no Python call per record.
            "delivery.report.only.error": True,
            "on_delivery": lambda error, _: failed.append(error),
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
    assert not failed, f"{len(failed)} records refused, the first: {failed[0]}"
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
