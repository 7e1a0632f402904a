"""A producer held to its producer_byte_rate quota, against the same producer without one.

Starts a private redis-server and a `kafkaesque serve` broker, sets producer_byte_rate on
client id "limited", then runs a confluent-kafka producer (1,000-byte records, as fast as
it can) as "unlimited" (the baseline) and as "limited". The limited run skips a warm-up
(a new rate is measured over at least 10 s, so about 10 s of quota passes at once, as in
Kafka) and measures the delivered bytes per second after it; it prints the ratio to the
quota (value bytes only: the broker also counts each request's few dozen header bytes),
and the throttle times librdkafka was told. Last, the cost of the quota checks per request
in the server's hot path, with no quota configured and with one for another client.

    python scripts/bench/quota.py [--quota BYTES_PER_S] [--warmup S] [--seconds S]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import timeit
from pathlib import Path
from types import SimpleNamespace

# The repository first: scripts/bench/wire.py would shadow the wire package.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import redis.asyncio
from broker_process import broker_on_embedded_redis
from confluent_kafka import Producer

from kafkaesque.hot.quota_store import QuotaStore
from kafkaesque.security.quota_rates import QuotaManager
from kafkaesque.security.quotas import check_alteration
from wire.net.throttling import Throttling

VALUE = b"q" * 1000


def run_producer(
    bootstrap: str, client_id: str, warmup: float, seconds: float
) -> tuple[float, list[int]]:
    """Bytes per second delivered after ``warmup`` s, over ``seconds`` s; throttle times."""
    throttles: list[int] = []
    delivered: list[tuple[float, int]] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 65536,
            "queue.buffering.max.messages": 20_000,
            "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000)),
        }
    )

    def on_delivery(error: object, message: object) -> None:
        if error is None:
            delivered.append((time.monotonic(), len(VALUE)))

    started = time.monotonic()
    end = started + warmup + seconds
    while time.monotonic() < end:
        try:
            producer.produce("quota", VALUE, partition=0, on_delivery=on_delivery)
            producer.poll(0)
        except BufferError:
            producer.poll(0.01)
    producer.purge(in_queue=True, in_flight=False)
    producer.flush(10)
    counted = sum(size for at, size in delivered if started + warmup <= at < end)
    return counted / seconds, throttles


async def set_quota(url: str, client_id: str, rate: float) -> None:
    client = redis.asyncio.Redis.from_url(url)
    alteration = check_alteration([("client-id", client_id)], [("producer_byte_rate", rate, False)])
    await QuotaStore(client).alter([alteration])
    await client.aclose()


def hot_path_ns(url: str, with_quota: bool) -> float:
    """ns per Produce request spent in Throttling.before and after."""
    manager = QuotaManager(QuotaStore(redis.asyncio.Redis.from_url(url)))
    if with_quota:
        asyncio.run(manager.refresh())  # "limited" has a quota; this client does not
    throttling = Throttling(manager)
    request = SimpleNamespace(api_key=0, client_id="other", size=65_000, body=None)
    response = object()
    calls = 200_000
    seconds = timeit.timeit(
        lambda: throttling.after(throttling.before(request), response, 100), number=calls
    )
    return seconds / calls * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quota", type=int, default=1 << 20, help="bytes/s (1 MiB)")
    parser.add_argument("--warmup", type=float, default=12.0)
    parser.add_argument("--seconds", type=float, default=24.0)
    args = parser.parse_args()
    with broker_on_embedded_redis() as (bootstrap, url):
        print(f"hot path, no quota configured: {hot_path_ns(url, False):.0f} ns per request")
        baseline, _ = run_producer(bootstrap, "unlimited", 1.0, 5.0)
        print(f"baseline (no quota):  {baseline / 1e6:8.2f} MB/s")
        asyncio.run(set_quota(url, "limited", args.quota))
        print(f"hot path, a quota for another client: {hot_path_ns(url, True):.0f} ns per request")
        time.sleep(1.5)  # the broker reads quotas once a second
        rate, throttles = run_producer(bootstrap, "limited", args.warmup, args.seconds)
        print(f"quota:                {args.quota / 1e6:8.2f} MB/s (producer_byte_rate)")
        after = f"over {args.seconds:g} s after a {args.warmup:g} s warm-up"
        print(f"limited producer:     {rate / 1e6:8.2f} MB/s {after}")
        print(f"ratio measured/quota: {rate / args.quota:8.3f}  (must be within 0.8-1.2)")
        print(f"baseline/quota:       {baseline / args.quota:8.1f}")
        if throttles:
            print(f"throttle_time_ms told: {len(throttles)} times, max {max(throttles)} ms")
        else:
            print("throttle_time_ms told: never")


if __name__ == "__main__":
    main()
