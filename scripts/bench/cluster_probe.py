"""What the candidate global-sequence schemes of docs/scale-out.md cost per append.

In one process, against throwaway servers (the test suite's server binary):

- single: ``Log.append`` on one server (append.lua with floor 0: ``INCRBY ks:gseq``); the
  baseline. ``single+central``: the same, each append preceded by an INCRBY on a counter
  key (a central sequencer reserving the append's ids: one more round trip).
  ``single+hlc``: ``Log(cluster=True).append`` on the same server: append.lua's per-slot
  hybrid logical clock (the slot hash's ``seq`` raised to ``max(seq + n, floor)``), the
  scheme the design picks, in the cluster key layout.
- cluster: a 3-primary cluster, one partition per primary, ``Log.append`` through
  redis-py's cluster client (the cluster layout: every key in the partition's slot).
  ``cluster+hlc`` is that; ``cluster+central`` first INCRBYs one central key, on one of
  the primaries, whichever shard the partition is on.

Each scheme runs ``--seconds`` with ``--tasks`` concurrent appenders per partition, for
batches of 1 and of 100 records (100 bytes each), ``--rounds`` times in turn, and prints
the median appends/s, records/s and the ratio to its baseline; on the single server also
the server's own time per append script (INFO commandstats), which the one client process
does not limit.

    python scripts/bench/cluster_probe.py [--seconds S] [--tasks N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import redis
import redis.asyncio
import redis.asyncio.cluster

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.keys import Keys
from kafkaesque.hot.log import Log
from kafkaesque.hot.scripts import source
from kafkaesque.records.batch import offset_count
from kafkaesque.records.build import build_batch
from tests.cluster_servers import ClusterServers
from tests.servers import RedisServer

Appender = Callable[[int, bytes], Awaitable[object]]


async def run(appenders: list[Appender], batch: bytes, seconds: float, tasks: int) -> float:
    """Appends per second over ``seconds``, ``tasks`` loops per appender."""
    count = 0
    deadline = time.perf_counter() + seconds

    async def loop(append: Appender) -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            await append(0, batch)
            count += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(a) for a in appenders for _ in range(tasks)))
    return count / (time.perf_counter() - started)


async def single_schemes(url: str) -> dict[str, list[Appender]]:
    client = redis.asyncio.Redis.from_url(url, max_connections=256)
    log = Log(client)
    await log.ensure_recovered()
    await log.create_topic(TopicConfig("bench", 1, page_size=10_000))
    hlc_log = Log(client, cluster=True)  # the cluster layout, on the one server
    await hlc_log.ensure_recovered()
    await hlc_log.create_topic(TopicConfig("bench-hlc", 1, page_size=10_000))

    async def single(_: int, batch: bytes) -> object:
        return await log.append("bench", 0, [batch])

    async def central(_: int, batch: bytes) -> object:
        await client.incrby("central:gseq", offset_count(batch))
        return await log.append("bench", 0, [batch])

    async def hlc(_: int, batch: bytes) -> object:
        return await hlc_log.append("bench-hlc", 0, [batch])

    return {"single": [single], "single+central": [central], "single+hlc": [hlc]}


async def cluster_schemes(url: str) -> dict[str, list[Appender]]:
    """One partition per primary, created with copies of the catalog keys in its slot."""
    client = redis.asyncio.cluster.RedisCluster.from_url(url, max_connections=256)
    await client.initialize()
    create = client.register_script(source("create"))
    log = Log(client)
    keys = Keys(cluster=True)
    partitions, owners = [], set()
    i = 0
    while len(partitions) < 3:
        name = f"bench{i}"
        i += 1
        p = keys.partition(name, 0)
        node = client.get_node_from_key(p.meta)
        if node.name in owners:
            continue
        owners.add(node.name)
        tag = p.prefix  # "ks:{name:0}:": the per-slot copies of the global keys
        config = TopicConfig(name, 1, page_size=10_000)
        await client.set(tag + "incarnation", "1")
        await create(
            keys=[tag + "topics", tag + "topic", tag + "incarnation", tag + "archiving", p.meta],
            args=[name, config.pack(), config.lua_settings()],
        )
        partitions.append(name)

    def appender(name: str, central: bool) -> Appender:
        async def append(_: int, batch: bytes) -> object:
            if central:
                await client.incrby("central:gseq", offset_count(batch))
            return await log.append(name, 0, [batch])

        return append

    return {
        "cluster+hlc": [appender(name, central=False) for name in partitions],
        "cluster+central": [appender(name, central=True) for name in partitions],
    }


def script_cost(server: redis.Redis | None) -> float | None:
    """The server's microseconds per EVALSHA since the last CONFIG RESETSTAT: the script's
    own cost, whatever the client process can drive."""
    if server is None:
        return None
    stats = server.info("commandstats").get("cmdstat_evalsha")
    return stats["usec_per_call"] if stats else None


async def measure(
    schemes: dict[str, list[Appender]],
    seconds: float,
    tasks: int,
    rounds: int,
    server: redis.Redis | None = None,
) -> None:
    """The median of ``rounds`` runs of each scheme, the schemes taking turns (a loaded
    machine then slows them alike); with ``server``, also the script's time in it."""
    baseline_name = next(iter(schemes))
    for records in (1, 100):
        batch = build_batch([b"v" * 100] * records)
        for appenders in schemes.values():
            await run(appenders, batch, 0.3, tasks)  # warm up
        samples: dict[str, list[float]] = {name: [] for name in schemes}
        costs: dict[str, list[float]] = {name: [] for name in schemes}
        for _ in range(rounds):
            for name, appenders in schemes.items():
                if server is not None:
                    server.config_resetstat()
                samples[name].append(await run(appenders, batch, seconds, tasks))
                cost = script_cost(server)
                if cost is not None:
                    costs[name].append(cost)
        results = {name: statistics.median(rates) for name, rates in samples.items()}
        base = results[baseline_name]
        for name, rate in results.items():
            cost = f"  script {statistics.median(costs[name]):5.1f} us" if costs[name] else ""
            print(
                f"  {name:16} batch of {records:3}: {rate:9.0f} appends/s "
                f"{rate * records:10.0f} records/s  x{rate / base:.2f} of {baseline_name}"
                f"{cost}"
            )


async def main(seconds: float, tasks: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ks-cluster-probe-") as directory:
        server = RedisServer(Path(directory) / "single")
        try:
            print(f"one server ({tasks} concurrent appenders):")
            schemes = await single_schemes(server.url)
            stats = redis.Redis.from_url(server.url)
            await measure(schemes, seconds, tasks, rounds, stats)
        finally:
            server.stop()
        cluster = ClusterServers(Path(directory) / "cluster")
        try:
            print(f"3-primary cluster (one partition per primary, {tasks} appenders each):")
            await measure(await cluster_schemes(cluster.url), seconds, tasks, rounds)
        finally:
            cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    asyncio.run(main(options.seconds, options.tasks, options.rounds))
