"""Kafka clients through the wire front end, against the storage alone in the same run.

Starts a private redis-server and a `kafkaesque serve` broker (a subprocess), then:

- throughput, in alternating rounds: confluent-kafka produces N records of 100 bytes to
  partition 0 (acks=1, linger 5 ms, 1 MB batches); the batches the broker stored are read
  back with raw redis-py (LRANGE of the partition's pages, about 1 MiB per call: the raw
  Redis read of the same records) and appended again, one per call, to another topic
  through `Log.append` in this process (the storage's cost of the same batches, without
  the broker); then a confluent-kafka consumer (fetch.queue.backoff.ms=50) reads the N
  records back from offset 0, and so does kcat (librdkafka in C, to /dev/null: the
  broker's rate when the client is not the limit); kcat also produces N records from a
  file, for the same reason, and to librdkafka's in-memory mock broker (what the client
  reaches when the broker costs next to nothing). Best round of each; the ratios are
  wire / storage;
- latency at a steady 5,000 records/s (each value carries its send time, a consumer
  thread with fetch.wait.max.ms 100 records arrival): p50/p99/p99.9 with linger.ms=0
  (a request per record: the broker's and the clients' round trips), linger.ms=1 (a
  low-latency setting) and the client's default linger (5 ms, which every record may
  wait in the producer before it is sent);
- fetch latency with many partitions: a consumer assigned every partition of a topic of
  1,000 (then 10,000) new partitions from offset 0; records appended one at a time to a
  random partition (linger.ms=0); p50/p99 of the time until the consumer has each.

    python scripts/bench/wire.py [--records N] [--rounds R] [--latency-seconds S]
                                 [--fanout-appends A] [--quick] [--no-write]
                                 [--only fanout|latency]

--quick: 200,000 records, 2 rounds, 2 s of latency, 50 appends per fan-out size.
--only fanout, --only latency: that part alone (nothing is written).
Results are also written to docs/benchmarks.md's "wire.py" section (its "Current
figures" block) unless --no-write.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import redis
import redis.asyncio
from broker_process import FAST_CONSUMER, VALUE, broker_on_embedded_redis, consume, produce
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.keys import Keys
from kafkaesque.hot.log import Log
from kafkaesque.records.batch import record_count

FETCH_BYTES = 1 << 20  # the consumer's max.partition.fetch.bytes (librdkafka's default)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def percentile(samples: list[float], p: float) -> float:
    """The sample at or below which ``p`` percent of ``samples`` (sorted) lie."""
    return samples[min(len(samples) - 1, max(0, int(len(samples) * p / 100 + 0.5) - 1))]


def latency(bootstrap: str, topic: str, seconds: float, linger_ms: int | None) -> list[float]:
    """Send 5,000 records/s carrying their send time; a consumer thread records arrival (ms).
    ``linger_ms`` None: the client's default."""
    rate = 5000
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "lat",
            "fetch.wait.max.ms": 100,
            "fetch.min.bytes": 1,
        }
    )
    config: dict[str, object] = {"bootstrap.servers": bootstrap, "acks": 1}
    if linger_ms is not None:
        config["linger.ms"] = linger_ms
    producer = Producer(config)
    # Warm up: the topic exists and the consumer has fetched once before we measure (a
    # record sent before the consumer has its position at the end is never seen: again).
    producer.produce(topic, b"warm-up", partition=0)
    producer.flush(10)
    consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    deadline = time.perf_counter() + 60
    while True:
        producer.produce(topic, b"warm-up", partition=0)
        producer.flush(10)
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            break
        if time.perf_counter() > deadline:
            raise RuntimeError("the latency consumer never got a record")
    while consumer.poll(0.2) is not None:  # the other warm-ups
        pass
    samples: list[float] = []
    total = int(seconds * rate)
    done = threading.Event()

    def receive() -> None:
        while len(samples) < total and not done.is_set():
            # poll, not consume(n): consume waits until n messages or its timeout.
            message = consumer.poll(0.5)
            if message is not None and message.error() is None and len(message.value()) > 8:
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
    return sorted(samples)


def fanout_latency(
    bootstrap: str, url: str, partitions: int, appends: int, max_seconds: float
) -> list[float]:
    """A consumer assigned all ``partitions`` of a new topic from their ends; one record at
    a time appended to a random partition; ms until the consumer has each (at most
    ``appends``, for at most ``max_seconds``)."""
    topic = f"fan{partitions}"

    async def create() -> None:
        log = Log(redis.asyncio.Redis.from_url(url))
        await log.create_topic(TopicConfig(topic, partitions))
        await log.redis.aclose()

    asyncio.run(create())
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"fan{partitions}", "fetch.wait.max.ms": 500}
    )
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    # The topic is new: its ends are offset 0, given as such so the consumer fetches at
    # once (from OFFSET_END it would first look each end up, and a record appended before
    # its partition's answer would be skipped).
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    rng = random.Random(partitions)

    def one(partition: int, timeout: float) -> float | None:
        """ms until the consumer has a record appended now; None after ``timeout`` s (a
        record that comes later is ignored)."""
        sent = time.perf_counter_ns().to_bytes(8, "big")
        producer.produce(topic, sent, partition=partition)
        producer.poll(0)
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            message = consumer.poll(0.05)
            if message is not None and message.error() is None and message.value() == sent:
                return (time.perf_counter_ns() - int.from_bytes(sent, "big")) / 1e6
        return None

    # Warm up until the consumer fetches.
    deadline = time.perf_counter() + 120
    while one(rng.randrange(partitions), 2.0) is None:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"the consumer of {partitions} partitions never got a record")
    samples: list[float] = []
    stop = time.perf_counter() + max_seconds
    while len(samples) < appends and time.perf_counter() < stop:
        time.sleep(rng.uniform(0, 0.02))  # not in step with the consumer's fetches
        got = one(rng.randrange(partitions), 30.0)
        samples.append(30_000.0 if got is None else got)  # not there in 30 s: counted as 30 s
    producer.flush(10)
    consumer.close()
    return sorted(samples)


def kcat_consume(bootstrap: str, topic: str, n: int) -> float | None:
    """Seconds kcat (librdkafka in C, no Python per record) takes to read the ``n``
    records of partition 0 to /dev/null: what the broker serves when the client is not
    the limit; None without kcat."""
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        return None
    command = [kcat, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning"]
    started = time.perf_counter()
    subprocess.run(
        [*command, "-c", str(n), "-q"],
        stdout=subprocess.DEVNULL,
        check=True,
        timeout=300,
    )
    return time.perf_counter() - started


def kcat_produce(bootstrap: str, topic: str, n: int) -> float | None:
    """Seconds kcat (librdkafka in C) takes to produce ``n`` records of 100 bytes from a
    file to partition 0, with the confluent-kafka producer's settings: the broker's rate
    when the producing client costs no Python per record; None without kcat."""
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        return None
    settings = ["linger.ms=5", "batch.size=1000000", "queue.buffering.max.messages=2000000"]
    with tempfile.NamedTemporaryFile() as lines:
        lines.write((VALUE + b"\n") * n)
        lines.flush()
        command = [kcat, "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-l", "-X", "acks=1"]
        for setting in settings:
            command += ["-X", setting]
        started = time.perf_counter()
        subprocess.run([*command, lines.name], check=True, timeout=300)
        return time.perf_counter() - started


@contextlib.contextmanager
def mock_broker() -> Iterator[str]:
    """librdkafka's in-memory mock broker (a cluster of one, threads of this process) for
    the block; yields its bootstrap. A client producing to it shows what the client
    itself reaches on this machine, the broker costing next to nothing."""
    holder = Producer({"test.mock.num.brokers": 1})
    broker = next(iter(holder.list_topics(timeout=10).brokers.values()))
    yield f"{broker.host}:{broker.port}"
    holder.flush(1)


def raw_read(r: redis.Redis, topic: str) -> tuple[float, list[bytes]]:
    """Seconds raw redis-py takes to read the partition's stored batches, about 1 MiB per
    LRANGE (one fetch's worth); and the batches."""
    p = Keys("ks").partition(topic, 0)
    pages = [int(page) for page in r.zrange(p.index, 0, -1)]
    batches: list[bytes] = []
    started = time.perf_counter()
    step = 1
    for page in pages:
        key = f"{p.prefix}page:{page}"
        pos = 0
        while got := r.lrange(key, pos, pos + step - 1):
            batches += got
            pos += len(got)
            step = max(1, FETCH_BYTES // max(1, len(got[0])))
    return time.perf_counter() - started, batches


def log_append(url: str, topic: str, batches: list[bytes]) -> float:
    """Seconds `Log.append` (in this process) takes to append ``batches``, one per call,
    to a new one-partition topic: what the storage costs for them without the broker."""

    async def run() -> float:
        log = Log(redis.asyncio.Redis.from_url(url))
        await log.create_topic(TopicConfig(topic, 1))
        await log.append(topic, 0, batches[:1])  # connected, the script loaded
        started = time.perf_counter()
        for batch in batches[1:]:
            await log.append(topic, 0, [batch])
        seconds = time.perf_counter() - started
        await log.redis.aclose()
        return seconds * len(batches) / max(1, len(batches) - 1)

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--fanout-appends", type=int, default=200)
    parser.add_argument("--fanout-seconds", type=float, default=30.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true", help="leave docs/benchmarks.md")
    parser.add_argument("--only", choices=["fanout", "latency"], help="run this part alone")
    args = parser.parse_args()
    if args.quick:
        args.records, args.rounds, args.latency_seconds = 200_000, 2, 2.0
        args.fanout_appends, args.fanout_seconds = 50, 15.0
    n = args.records
    best = dict.fromkeys(
        ("produce", "append", "consume", "raw", "kcat", "kcat_produce", "kcat_mock"), 1e9
    )
    if args.only == "fanout":
        with broker_on_embedded_redis() as (bootstrap, url):
            fanout = {
                count: fanout_latency(
                    bootstrap, url, count, args.fanout_appends, args.fanout_seconds
                )
                for count in (1000, 10_000)
            }
        print("\n".join(fanout_lines(fanout)))
        return
    if args.only == "latency":
        with broker_on_embedded_redis() as (bootstrap, _):
            print("\n".join(latency_lines(latencies(bootstrap, args.latency_seconds))))
        return
    with broker_on_embedded_redis() as (bootstrap, url):
        r = redis.Redis.from_url(url)
        produce(bootstrap, "warm", 20_000)  # the broker's imports and caches, off the clock
        consume(bootstrap, "warm", 20_000, FAST_CONSUMER)
        for i in range(args.rounds):
            seconds = {"produce": produce(bootstrap, f"bench{i}", n)}
            seconds["raw"], batches = raw_read(r, f"bench{i}")
            assert sum(map(record_count, batches)) == n
            seconds["append"] = log_append(url, f"log{i}", batches)
            seconds["consume"] = consume(bootstrap, f"bench{i}", n, FAST_CONSUMER)
            kcat = kcat_consume(bootstrap, f"bench{i}", n)
            if kcat is not None:
                seconds["kcat"] = kcat
            kcat = kcat_produce(bootstrap, f"kcat{i}", n)
            if kcat is not None:
                seconds["kcat_produce"] = kcat
                with mock_broker() as mock:
                    seconds["kcat_mock"] = kcat_produce(mock, f"kcat{i}", n) or 1e9
            print(
                f"round {i + 1}: "
                + "  ".join(f"{k} {n / s:,.0f}/s" for k, s in seconds.items())
                + f"  ({len(batches)} batches)",
                flush=True,
            )
            for key, s in seconds.items():
                best[key] = min(best[key], s)
        lingers = latencies(bootstrap, args.latency_seconds)
        fanout = {
            count: fanout_latency(bootstrap, url, count, args.fanout_appends, args.fanout_seconds)
            for count in (1000, 10_000)
        }
    lines = [
        f"{n:,} records of {len(VALUE)} bytes, confluent-kafka <-> kafkaesque serve <->"
        f" redis-server; best of {args.rounds} rounds (cpus: {os.cpu_count()}, shared)",
        f"produce  {n / best['produce']:>11,.0f} records/s   Log.append of the same batches"
        f" {n / best['append']:>11,.0f} records/s   ratio {best['append'] / best['produce']:.2f}",
        f"consume  {n / best['consume']:>11,.0f} records/s   raw Redis LRANGE of them     "
        f" {n / best['raw']:>11,.0f} records/s   ratio {best['raw'] / best['consume']:.2f}",
    ]
    if best["kcat_produce"] < 1e9:
        lines.append(
            f"produce  {n / best['kcat_produce']:>11,.0f} records/s with kcat (C, no Python per"
            f" record)   ratio {best['append'] / best['kcat_produce']:.2f}"
        )
        lines.append(
            f"produce  {n / best['kcat_mock']:>11,.0f} records/s with kcat to librdkafka's"
            " mock broker (the client's own ceiling here)"
        )
    if best["kcat"] < 1e9:
        lines.append(
            f"consume  {n / best['kcat']:>11,.0f} records/s with kcat (C, no Python per record)"
            f"   ratio {best['raw'] / best['kcat']:.2f}"
        )
    lines += latency_lines(lingers)
    lines += fanout_lines(fanout)
    print("\n".join(lines))
    if not args.no_write:
        write_docs(lines)


def latencies(bootstrap: str, seconds: float) -> dict[int | None, list[float]]:
    """Latency samples per producer linger.ms: 0 (a request per record), 1 (a low-latency
    setting), None (the client's default, 5 ms)."""
    return {
        linger: latency(bootstrap, f"latency{linger}", seconds, linger) for linger in (0, 1, None)
    }


def latency_lines(lingers: dict[int | None, list[float]]) -> list[str]:
    return [
        "latency at 5,000 records/s ("
        + ("linger default" if linger is None else f"linger.ms={linger}")
        + f"): p50 {percentile(samples, 50):.2f} ms  p99 {percentile(samples, 99):.2f} ms"
        f"  p99.9 {percentile(samples, 99.9):.2f} ms  ({len(samples)} samples)"
        for linger, samples in lingers.items()
    ]


def fanout_lines(fanout: dict[int, list[float]]) -> list[str]:
    return [
        f"fetch latency, {count:>6,} partitions assigned: p50 {percentile(samples, 50):.1f} ms"
        f"  p99 {percentile(samples, 99):.1f} ms  ({len(samples)} appends)"
        for count, samples in fanout.items()
    ]


def write_docs(lines: list[str]) -> None:
    """Replace the indented block after "Current figures:" in the wire.py section."""
    text = DOCS.read_text()
    block = "\n".join("    " + line for line in lines)
    pattern = re.compile(
        r"(## wire\.py: .*?\nCurrent figures[^\n]*:\n\n)((?:    [^\n]*\n)+)", re.DOTALL
    )
    new, count = pattern.subn(lambda m: m.group(1) + block + "\n", text, count=1)
    if count:
        DOCS.write_text(new)


if __name__ == "__main__":
    main()
