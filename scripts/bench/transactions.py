"""Transactional produce against idempotent produce, and read_committed consume against
read_uncommitted consume of the same topic, through the broker in the same run.

Starts a private redis-server and a `kafkaesque serve` broker. With confluent-kafka:
produces N records of 100 bytes to one partition idempotently (acks=all, as a
transactional producer must), then N more with a transactional producer in transactions
of --txn-size records (begin, produce, commit; every --abort-every'th one aborted
instead, if given). Prints records/s, transactions/s and the ratio to idempotent produce.
Then reads the transactional topic from offset 0 to its end (librdkafka's partition EOF:
the high watermark, or the last stable offset for read_committed) with
isolation.level=read_uncommitted and read_committed, timed from the first record, best
of --rounds (default 5) each, the two taking turns to go first; prints records/s, the
records each saw and the ratio of read_committed's records/s to read_uncommitted's.
Also the CPU seconds of the broker, Redis and the client (/proc) per million records and
per transaction, the round trip of one durable write (a transaction's three requests
that write, AddPartitionsToTxn, Produce and EndTxn, each wait for one, in turn), and the
same transactions against librdkafka's in-memory mock cluster: the client's own time;
and the broker's own time per transaction on each of its requests (from its Prometheus
request latency: arrival to answer queued, Redis' round trips and fsyncs included), which
tells the broker's share of a transaction from the client's and the network's; and the
Redis commands a transaction costs (INFO commandstats).
Defaults: 200,000 records, transactions of 100, none aborted.

    python scripts/bench/transactions.py [--records N] [--txn-size S] [--abort-every K]
                                         [--rounds R]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import redis
from broker_process import (
    FAST_CONSUMER,
    VALUE,
    BrokerOnRedis,
    durable_write_ms,
    free_port,
    produce,
    start_broker,
)
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from proc_cpu import measure

from kafkaesque.hot.embedded import EmbeddedRedis

TIMEOUT = 60.0
# The requests of a transaction, each answered before the next is sent.
TXN_APIS = ("add_partitions_to_txn", "produce", "end_txn")


@contextlib.contextmanager
def broker_with_metrics() -> Iterator[tuple[BrokerOnRedis, str]]:
    """A broker on a fresh embedded Redis (appendfsync always), serving Prometheus metrics;
    yields it and its metrics URL."""
    with tempfile.TemporaryDirectory(prefix="ks-bench-") as home:
        server = EmbeddedRedis(Path(home))
        try:
            url = server.ensure_started()
            port, metrics_port = free_port(), free_port()
            broker = start_broker(url, port, extra=["--metrics", str(metrics_port)])
            try:
                running = BrokerOnRedis(f"127.0.0.1:{port}", url, broker.pid, server.pid() or 0)
                yield running, f"http://127.0.0.1:{metrics_port}/metrics"
            finally:
                broker.terminate()
                broker.wait(10)
        finally:
            server.stop()


def redis_commands(redis_url: str) -> dict[str, int]:
    """Calls per Redis command so far (INFO commandstats)."""
    stats = redis.Redis.from_url(redis_url).info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def request_seconds(metrics_url: str) -> dict[str, tuple[float, float]]:
    """Per API: (requests, seconds) the broker spent on them so far, from a request's
    arrival to its answer being queued (kafkaesque_request_seconds)."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    found: dict[str, list[float]] = {}
    for kind, api, value in re.findall(
        r'^kafkaesque_request_seconds_(count|sum)\{api="([^"]+)"\} (\S+)$', text, re.M
    ):
        found.setdefault(api, [0.0, 0.0])[kind == "sum"] = float(value)
    return {api: (count, total) for api, (count, total) in found.items()}


def produce_transactions(
    bootstrap: str,
    topic: str,
    n: int,
    size: int,
    abort_every: int,
    config: dict[str, object] | None = None,
) -> tuple[float, int]:
    """Seconds a transactional confluent-kafka producer (linger 5 ms, big batches; updated
    with ``config``) takes to send ``n`` records in transactions of ``size``, from
    init_transactions on; and how many records were committed."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{topic}",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            **(config or {}),
        }
    )
    started = time.perf_counter()
    producer.init_transactions(TIMEOUT)
    committed = 0
    for number, first in enumerate(range(0, n, size), start=1):
        count = min(size, n - first)
        producer.begin_transaction()
        for _ in range(count):
            producer.produce(topic, VALUE, partition=0)
        if abort_every and number % abort_every == 0:
            producer.flush(TIMEOUT)  # the records reach the log, then are aborted
            producer.abort_transaction(TIMEOUT)
        else:
            producer.commit_transaction(TIMEOUT)
            committed += count
    return time.perf_counter() - started, committed


def consume_to_end(bootstrap: str, topic: str, isolation: str) -> tuple[float, int]:
    """Seconds a confluent-kafka consumer (``FAST_CONSUMER``) with ``isolation`` takes
    from its first record of partition 0 (offset 0 on) to the partition's end, and the
    records it was given. Short waits (5 ms) for more records and for fetches, so that
    the end is seen within a few ms of the last record."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{isolation}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            # The end is seen from an empty fetch: that waits fetch.wait.max.ms (500).
            "fetch.wait.max.ms": 5,
            **FAST_CONSUMER,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = None
    deadline = time.perf_counter() + 10 * TIMEOUT
    done = False
    while not done:
        assert time.perf_counter() < deadline, f"{got} records after {10 * TIMEOUT:.0f} s"
        for message in consumer.consume(10_000, timeout=0.005):
            error = message.error()
            if error is None:
                got += 1
                if started is None:
                    started = time.perf_counter()
            elif error.code() == KafkaError._PARTITION_EOF:
                done = True
            else:
                raise RuntimeError(error)
    elapsed = time.perf_counter() - (started or 0.0)
    consumer.close()
    return elapsed, got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--txn-size", type=int, default=100)
    parser.add_argument("--abort-every", type=int, default=0, help="0: commit them all")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n, size = args.records, args.txn_size
    transactions = -(-n // size)
    with broker_with_metrics() as (running, metrics_url):
        bootstrap = running.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics(
            [NewTopic(t, 1) for t in ("warm-up", "idem", "txn")]
        ).values():
            future.result(30)
        produce(bootstrap, "warm-up", 10_000, acks="all", idempotent=True)
        produce_transactions(bootstrap, "warm-up", 20 * size, size, 0)
        with measure(running.pids()) as idempotent_cpu:
            idempotent_s = produce(bootstrap, "idem", n, acks="all", idempotent=True)
        before, commands = request_seconds(metrics_url), redis_commands(running.redis_url)
        with measure(running.pids()) as txn_cpu:
            txn_s, committed = produce_transactions(bootstrap, "txn", n, size, args.abort_every)
        after = request_seconds(metrics_url)
        commands = {
            name: calls - commands.get(name, 0)
            for name, calls in redis_commands(running.redis_url).items()
            if calls > commands.get(name, 0) and name not in ("info", "ping")
        }
        write_ms = durable_write_ms(running.redis_url)
        reads: dict[str, list[tuple[float, int]]] = {"read_uncommitted": [], "read_committed": []}
        for turn in range(args.rounds):
            order = list(reads) if turn % 2 == 0 else list(reads)[::-1]  # take turns first
            for isolation in order:
                reads[isolation].append(consume_to_end(bootstrap, "txn", isolation))
    mock = {"test.mock.num.brokers": 1}
    mock_s, _ = produce_transactions("", "mock", n, size, args.abort_every, mock)
    print(f"{n} records of {len(VALUE)} bytes to 1 partition (cpus: {os.cpu_count()})")
    aborted = f", every {args.abort_every}th aborted" if args.abort_every else ""
    print(f"{'produce, idempotent (acks=all):':<50}{n / idempotent_s:>10,.0f} records/s")
    print(
        f"{f'produce, transactions of {size}{aborted}:':<50}{n / txn_s:>10,.0f} records/s"
        f"   {transactions / txn_s:>7,.0f} transactions/s"
        f"   {txn_s / transactions * 1000:.2f} ms each"
        f"   ratio {idempotent_s / txn_s:.2f}"
    )
    print(f"  idempotent:   {idempotent_cpu.line(n)}")
    print(f"  transactions: {txn_cpu.line(n)}")
    per_txn = "  ".join(f"{k} {v / transactions * 1000:.2f}" for k, v in txn_cpu.seconds.items())
    print(f"  per transaction: {per_txn} ms of CPU")
    # AddPartitionsToTxn, Produce and EndTxn each write to Redis and wait for the answer,
    # one after the other: under appendfsync always each waits for an fsync.
    print(
        f"one durable write (SET) on this Redis: median {write_ms:.2f} ms; a transaction "
        f"makes 3 in turn: {3 * write_ms:.2f} ms at least"
    )
    print(
        f"the same transactions against librdkafka's mock cluster (the client's own):"
        f" {mock_s / transactions * 1000:.2f} ms each"
    )
    # Where a transaction's time goes: the broker's own time on each of its requests
    # (arrival to answer queued: Redis' round trips and fsyncs included), the rest being
    # the client's and the network's.
    print(
        "Redis commands per transaction: "
        + ", ".join(
            f"{name} {calls / transactions:.2f}"
            for name, calls in sorted(commands.items(), key=lambda item: -item[1])
            if calls / transactions >= 0.01
        )
    )
    spent = []
    for api in TXN_APIS:
        count = after.get(api, (0.0, 0.0))[0] - before.get(api, (0.0, 0.0))[0]
        total = after.get(api, (0.0, 0.0))[1] - before.get(api, (0.0, 0.0))[1]
        spent.append((api, count, total))
    broker_ms = sum(total for _, _, total in spent) / transactions * 1000
    each_ms = txn_s / transactions * 1000
    print(
        f"in the broker per transaction: {broker_ms:.2f} ms of the {each_ms:.2f}"
        " ("
        + ", ".join(
            f"{api} {count / transactions:.1f} x {total / count * 1000 if count else 0:.2f} ms"
            for api, count, total in spent
        )
        + ")"
    )
    best = {isolation: min(runs) for isolation, runs in reads.items()}
    uncommitted_s, uncommitted_n = best["read_uncommitted"]
    for isolation, (seconds, got) in best.items():
        print(
            f"{f'consume, {isolation} (best of {args.rounds}):':<50}"
            f"{got / seconds:>10,.0f} records/s   {got:>8} records"
            f"   ratio {got / seconds / (uncommitted_n / uncommitted_s):.2f}"
        )
    if uncommitted_n != n:
        print(f"read_uncommitted saw {uncommitted_n} of the {n} records")
    if best["read_committed"][1] != committed:
        print(f"read_committed saw {best['read_committed'][1]} records, {committed} were committed")


if __name__ == "__main__":
    main()
