"""Many partitions in one request: a fetch of N caught-up partitions and a produce to N
partitions, each in one Redis round trip, against a Redis call per partition (the
baseline: what the broker did before; same run, same server, alternating rounds), and a
fetch session's read cache, which leaves quiet partitions unread.

    python scripts/bench/partitions.py [--partitions 1000 10000] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from redis_servers import add_server_option, running_server

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.connect import open_log
from kafkaesque.hot.notify import Notifier
from kafkaesque.partition.layer import Partitions
from kafkaesque.partition.read_types import FetchRequest, ReadCache
from kafkaesque.records.build import build_batch

BATCH = build_batch([b"v" * 100] * 10)  # 10 records of 100 bytes per partition


async def seconds(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def best_of(rounds: int, *calls: Callable[[], Awaitable[object]]) -> list[float]:
    """Each call's best time (the least disturbed by the machine) over ``rounds``
    alternating rounds, so all see the same load."""
    best = [float("inf")] * len(calls)
    for _ in range(rounds):
        for i, call in enumerate(calls):
            best[i] = min(best[i], await seconds(call))
    return best


async def produce(partitions: Partitions, topic: str, n: int, rounds: int) -> None:
    records = {(topic, p): BATCH for p in range(n)}

    async def a_call_each() -> None:
        await asyncio.gather(*(partitions.append_records(t, p, b) for (t, p), b in records.items()))

    each, one = await best_of(rounds, a_call_each, lambda: partitions.append_many(records))
    print(
        f"produce to {n:,} partitions: one round trip {one * 1000:.1f} ms, a call each "
        f"{each * 1000:.1f} ms (baseline): {each / one:.2f}x faster"
    )


async def fetch(partitions: Partitions, notifier: Notifier, topic: str, n: int, rounds: int):
    log = partitions.log
    end = (await log.state(topic, 0)).log_end
    requests = [FetchRequest(topic, p, end, 1 << 20) for p in range(n)]

    async def a_read_each() -> None:
        for r in requests:
            await log.read(r.topic, r.partition, r.offset, r.max_bytes)

    each, one = await best_of(rounds, a_read_each, lambda: partitions.fetch(requests, 50 << 20))
    # A session's later fetches, within the cache's refresh time of its first.
    cache = ReadCache(notifier)
    await partitions.fetch(requests, 50 << 20, cache=cache)
    [kept] = await best_of(rounds, lambda: partitions.fetch(requests, 50 << 20, cache=cache))
    cache.close()
    print(
        f"fetch of {n:,} caught-up partitions: one round trip {one * 1000:.1f} ms, a "
        f"call each {each * 1000:.1f} ms (baseline): {each / one:.1f}x faster; in a "
        f"fetch session with nothing new {kept * 1000:.2f} ms ({each / kept:.0f}x)"
    )


async def bench(url: str, counts: list[int], rounds: int) -> None:
    log = open_log(url)
    await log.ensure_recovered()
    notifier = Notifier(log.redis, log.channel(""))
    notifier.start()
    partitions = Partitions(log, notifier)
    for n in counts:
        await log.create_topic(TopicConfig(f"p{n}", n, page_size=1_000))
        await produce(partitions, f"p{n}", n, rounds)
        await asyncio.sleep(2)  # the produce's notifications arrive before the fetches
        await fetch(partitions, notifier, f"p{n}", n, rounds)
    await notifier.stop()
    await log.redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--rounds", type=int, default=3)
    add_server_option(parser)
    args = parser.parse_args()
    with running_server(args.server, "partitions-bench-") as url:
        asyncio.run(bench(url, args.partitions, args.rounds))


if __name__ == "__main__":
    main()
