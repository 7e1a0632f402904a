"""Share groups (KIP-932) through the wire front end: records/s accepted by 1, 2 and 4
share consumers of one share group on one partition, as a ratio to one classic consumer
reading the same records in the same run, and Redis' cost of an acknowledgement.

Starts a private redis-server and a `kafkaesque serve` broker, produces N records of 100
bytes to a one-partition topic (batches of about 400 records), then:

- the baseline: one confluent-kafka classic consumer reads the N records;
- for 1, 2 and 4 confluent-kafka ShareConsumers (each its own process, implicit
  acknowledgement: every record a poll returned is accepted by the next poll) in a new
  share group starting at the earliest offset: the time until the share-partition's start
  offset reaches N, i.e. every record accepted, read from Redis, and whether the consumers
  got N records in all (each delivered once: no redelivery without a failure);
- Redis' cost per acknowledged record: share_ack.lua's time inside Redis (INFO
  commandstats, after CONFIG RESETSTAT) per record, for acknowledgements of 500 records and
  of 1, beside append.lua's per record appended (the produce above) in the same Redis.

    python scripts/bench/share_groups.py [--records N]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time
from typing import Any

import redis
import redis.asyncio
from broker_process import FAST_CONSUMER, broker_on_embedded_redis, consume, produce
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kafkaesque.groups.share.config import ShareGroupConfig
from kafkaesque.hot.keys import Keys
from kafkaesque.hot.share_store import ShareStore

TOPIC = "bench"


def create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)], request_timeout=30)[TOPIC].result(30)


def share_group(bootstrap: str, group: str) -> None:
    """The share group reads from the earliest offset, with room for many records in flight."""
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in (
            ("share.auto.offset.reset", "earliest"),
            ("share.partition.max.record.locks", "10000"),
        )
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def member(bootstrap: str, group: str, ready: Any, go: Any, stop: Any, counts: Any, i: int) -> None:
    """A share consumer process: subscribes, waits for "go", polls until "stop"."""
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([TOPIC])
    ready.release()
    go.wait()
    got = 0
    while not stop.is_set():
        got += len(consumer.poll(0.2))
        counts[i] = got
    consumer.close()


def share_start(redis_url: str, group: str) -> int:
    """The share-partition's start offset (-1: none yet)."""
    state, _, _ = Keys().share_partition(group, TOPIC, 0)
    value = redis.Redis.from_url(redis_url).hget(state, "spso")
    return -1 if value is None else int(value)


def share_run(bootstrap: str, redis_url: str, consumers: int, n: int) -> tuple[float, list[int]]:
    """Seconds until ``consumers`` share consumers accepted every one of the ``n`` records,
    and how many each got."""
    group = f"share-{consumers}"
    share_group(bootstrap, group)
    ctx = multiprocessing.get_context("spawn")
    ready, go, stop = ctx.Semaphore(0), ctx.Event(), ctx.Event()
    counts = ctx.Array("q", consumers)
    procs = [
        ctx.Process(target=member, args=(bootstrap, group, ready, go, stop, counts, i))
        for i in range(consumers)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    started = time.perf_counter()
    go.set()
    while share_start(redis_url, group) < n:
        time.sleep(0.01)
        if time.perf_counter() - started > 300:
            raise RuntimeError(f"{consumers} consumers: not every record accepted in 300 s")
    elapsed = time.perf_counter() - started
    stop.set()
    for p in procs:
        p.join(30)
    return elapsed, list(counts)


def script_usec(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """EVALSHA's calls and microseconds inside Redis (INFO commandstats)."""
    stats = client.info("commandstats")
    evalsha = stats.get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return {"evalsha": (int(evalsha["calls"]), int(evalsha["usec"]))}


async def ack_cost(redis_url: str, batch: int, records: int) -> float:
    """Microseconds inside Redis per acknowledged record of share_ack.lua, acknowledging
    ``records`` acquired records ``batch`` at a time."""
    client = redis.asyncio.Redis.from_url(redis_url)
    store = ShareStore(client, Keys())
    group, tp = f"cost-{batch}", ("cost", 0)
    config = ShareGroupConfig(record_lock_duration_ms=60_000, max_record_locks=100_000)
    await store.prepare(group, tp, 0, config, 0, 0, records)
    ranges = [(i, min(i + batch, records) - 1, True) for i in range(0, records, batch)]
    await store.acquire(group, tp, "m", 0, config, records, ranges)
    sync = redis.Redis.from_url(redis_url)
    sync.config_resetstat()
    for first, last, _ in ranges:
        code, message, _ = await store.acknowledge(group, tp, "m", 1, config, [(first, last, [1])])
        assert code == 0, message
    _, usec = script_usec(sync)["evalsha"]
    await client.aclose()
    return usec / records


def append_cost(redis_url: str, bootstrap: str, n: int) -> float:
    """Microseconds inside Redis per record appended by a produce of ``n`` records."""
    sync = redis.Redis.from_url(redis_url)
    sync.config_resetstat()
    produce(bootstrap, TOPIC + "-cost", n)
    _, usec = script_usec(sync)["evalsha"]
    return usec / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    n = parser.parse_args().records
    with broker_on_embedded_redis() as (bootstrap, redis_url):
        create_topic(bootstrap)
        # Batches of about 400 records (as queue producers send them, a few at a time),
        # not the thousands a bulk load makes: acquisition takes whole batches.
        produce_s = produce(bootstrap, TOPIC, n, config={"batch.size": 50_000})
        print(f"produced {n} records in {produce_s:.2f} s")
        classic_s = consume(bootstrap, TOPIC, n, FAST_CONSUMER)
        classic = n / classic_s
        print(f"1 classic consumer: {classic:,.0f} records/s (baseline)")
        for consumers in (1, 2, 4):
            seconds, counts = share_run(bootstrap, redis_url, consumers, n)
            rate = n / seconds
            # Every record accepted (the start offset reached N); delivered once each if
            # the consumers got N records in all (a redelivery would add to the count).
            once = "each delivered once" if sum(counts) == n else f"{sum(counts) - n} redelivered"
            print(
                f"{consumers} share consumer(s): {rate:,.0f} records/s accepted, "
                f"{rate / classic:.3f} of the classic consumer; records each: {counts}, {once}"
            )
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC + "-cost", 1, 1)])[TOPIC + "-cost"].result(30)
        appended = append_cost(redis_url, bootstrap, min(n, 100_000))
        print(f"Redis time per record appended (append.lua, produce batches): {appended:.2f} us")
        for batch in (500, 1):
            cost = asyncio.run(ack_cost(redis_url, batch, min(n, 20_000)))
            print(
                f"Redis time per acknowledged record (share_ack.lua, {batch} per call): "
                f"{cost:.2f} us, {cost / appended:.1f}x an append's"
            )


if __name__ == "__main__":
    main()
