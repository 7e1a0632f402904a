"""Idempotent producers flat out into a small Redis: nothing acknowledged may be lost or
written twice while Redis keeps filling up and the archiver keeps making room.

    python scripts/full_redis.py [--seconds 120] [--producers 4] [--maxmemory 64mb]
                                 [--message-timeout-ms MS]

Starts its own redis-server (maxmemory, noeviction, AOF), a throwaway PostgreSQL and a
broker that archives into it (every 10 s, releasing archived pages when Redis is nearly
full); confluent-kafka producers (enable.idempotence, acks=all) send as fast as they can
to 4 partitions; then every partition is read back from offset 0 (the archived part from
PostgreSQL). Prints what was acknowledged, failed, lost and duplicated; exits 1 on a loss
or a duplicate. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.pg import PostgresServer
from tests.servers import RedisServer
from tests.wire.conftest import Broker

TOPIC = "full"
PARTITIONS = 4
PAD = b"x" * 100


def produce(
    name: str,
    bootstrap: str,
    until: float,
    timeout_ms: int | None,
    acked: list,
    failed: collections.Counter,
) -> None:
    """One producer flat out until ``until``; acknowledged (partition, offset, value) go
    to ``acked``, failures by reason to ``failed``."""
    settings: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
    }
    if timeout_ms:
        settings["message.timeout.ms"] = timeout_ms
    producer = Producer(settings)

    def delivered(error: object, message: object) -> None:
        if error is not None:
            failed[str(error)] += 1
        else:
            acked.append((message.partition(), message.offset(), message.value()))  # type: ignore[attr-defined]

    i = 0
    while time.monotonic() < until:
        try:
            value = f"{name}-{i}-".encode() + PAD
            producer.produce(TOPIC, value, partition=i % PARTITIONS, on_delivery=delivered)
            i += 1
        except BufferError:  # the local queue is full: Redis is holding producers back
            producer.poll(0.05)
        producer.poll(0)
    producer.flush(600)


def read_back(bootstrap: str) -> dict[bytes, list[tuple[int, int]]]:
    """Every record of the topic: value -> where it stands (partition, offset)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "read-back", "enable.auto.commit": False}
    )
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
        for p in range(PARTITIONS)
    }
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    found: dict[bytes, list[tuple[int, int]]] = collections.defaultdict(list)
    read = collections.Counter()
    deadline = time.monotonic() + 600
    while any(read[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                found[message.value()].append((message.partition(), message.offset()))
                read[message.partition()] += 1
    consumer.close()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--maxmemory", default="64mb")
    parser.add_argument(
        "--message-timeout-ms", type=int, default=None, help="librdkafka's (default 300000)"
    )
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="ks-full-"))
    redis = RedisServer(
        directory / "redis",
        appendonly=True,
        extra_args=["--maxmemory", args.maxmemory, "--maxmemory-policy", "noeviction"],
    )
    pg = PostgresServer()
    broker = Broker(redis.url, directory / "broker", pg_dsn=pg.dsn())
    try:
        broker.cli("create", TOPIC, "--partitions", str(PARTITIONS))
        acked: list[tuple[int, int, bytes]] = []
        failed: collections.Counter = collections.Counter()
        until = time.monotonic() + args.seconds
        threads = [
            threading.Thread(
                target=produce,
                args=(f"p{k}", broker.bootstrap, until, args.message_timeout_ms, acked, failed),
            )
            for k in range(args.producers)
        ]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            time.sleep(5)
            print(f"{len(acked):,} acknowledged", file=sys.stderr)
        found = read_back(broker.bootstrap)
        lost = [value for _, _, value in acked if value not in found]
        duplicated = {value: at for value, at in found.items() if len(at) > 1}
        print(
            f"{args.producers} producers, {args.seconds:g} s, maxmemory {args.maxmemory}: "
            f"{len(acked):,} acknowledged, {sum(failed.values()):,} failed "
            f"({', '.join(f'{n:,} {why}' for why, n in failed.items()) or 'none'}), "
            f"{len(lost):,} lost, {len(duplicated):,} duplicated"
        )
        full = broker.stderr().count("nearly full")
        print(f"the broker held producers back {full} times (Redis nearly full)")
        return 1 if lost or duplicated else 0
    finally:
        broker.stop()
        redis.stop()
        pg.stop()
        subprocess.run(["rm", "-rf", str(directory)], check=False)


if __name__ == "__main__":
    sys.exit(main())
