"""The web console's speed, over real HTTP on loopback, on private servers.

Starts its own redis-server (kafkaesque.hot.embedded.EmbeddedRedis) and PostgreSQL
(storage_pg.EmbeddedPostgres) in a temp dir, and the console (kafkaesque.console.app) in
this process. Measures, each against a baseline in the same process (the same data read
directly through the layers the page uses, without HTTP and HTML):

- the topic list with --topics topics: p95 of GET /topics (baseline: Log.topic_configs
  and Log.partition_offsets, what the page reads);
- 100 messages from Redis (newest first) and 100 from the archive (from offset 0, which
  Redis dropped after archiving): p95 of GET /topics/T/messages (baseline: the same 100
  records read and decoded through the partition layer);
- lag on the page after a commit: a reader polls the group's lag fragment every 2 s, as
  the page's script does; commits land at random moments; the delay until the page shows
  the new lag (baseline: reading the committed offset directly).

    python scripts/bench/console.py [--topics N] [--rounds R]

Goals: topic list p95 < 200 ms; 100 messages p95 < 300 ms hot and archived; lag on the
page within 5 s of a commit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.console.app import build_app, make_console
from kafkaesque.console.records import bounds, read_forward
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.hot.connect import open_log
from kafkaesque.hot.embedded import EmbeddedRedis
from kafkaesque.hot.log import Log
from kafkaesque.records.build import build_batch
from storage_pg import EmbeddedPostgres
from storage_pg.tiered import Archive, attach

POLL_SECONDS = 2.0  # the group page's data-every


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[-1] if len(samples) >= 20 else max(samples)


async def timed(fn: Callable[[], Awaitable[object]], rounds: int) -> list[float]:
    await fn()  # warm up
    found = []
    for _ in range(rounds):
        started = time.perf_counter()
        await fn()
        found.append(time.perf_counter() - started)
    return found


def report(what: str, page: list[float], base: list[float], goal: float | None) -> None:
    ratio = p95(page) / p95(base) if p95(base) else float("inf")
    verdict = ""
    if goal is not None:
        met = "met" if p95(page) < goal else "MISSED"
        verdict = f" (goal < {goal * 1000:.0f} ms: {met})"
    print(
        f"{what}: p95 {p95(page) * 1000:.1f} ms, median {statistics.median(page) * 1000:.1f} ms; "
        f"direct through the layers p95 {p95(base) * 1000:.1f} ms; ratio {ratio:.1f}x{verdict}",
        flush=True,
    )


async def fill(log: Log, archive: Archive, topics: int) -> None:
    await log.enable_archiving()
    for i in range(topics):
        await log.create_topic(TopicConfig(f"topic-{i:04d}", 1))
    value = json.dumps({"id": 1, "name": "x" * 80}).encode()
    await log.create_topic(TopicConfig("hot", 1))
    await log.append("hot", 0, [build_batch([value] * 100, [b"key"] * 100)])
    await log.create_topic(TopicConfig("cold", 1, page_size=100, max_pages=1))
    for _ in range(10):
        await log.append("cold", 0, [build_batch([value] * 100, [b"key"] * 100)])
    archiver = await archive.archiver(log, idle_close_ms=0)
    await archiver.run_once()
    state = await log.state("cold", 0)  # retention drops the archived pages
    assert state.log_start >= 100, state


async def bench(redis_url: str, dsn: str, topics: int, rounds: int) -> None:
    log = open_log(redis_url)
    archive = Archive(dsn)
    attach(log, archive)
    await archive.bind()
    await fill(log, archive, topics)
    state = make_console(log, admin=False, archive_=archive, sample_seconds=3600)
    runner = web.AppRunner(build_app(state), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}"
    layer = state.layer
    try:
        async with aiohttp.ClientSession() as http:

            async def get(path: str) -> str:
                async with http.get(base + path) as answer:
                    assert answer.status == 200, (path, answer.status)
                    return await answer.text()

            shown = await get("/topics")
            assert f"Topics ({topics + 2:,})" in shown

            async def direct_list() -> None:
                configs = await log.topic_configs()
                await log.partition_offsets(
                    [(c.name, p) for c in configs for p in range(c.partitions)]
                )

            page = await timed(lambda: get("/topics"), rounds)
            report(
                f"topic list, {topics + 2:,} topics", page, await timed(direct_list, rounds), 0.2
            )

            for topic, query, start in (
                ("hot", "partition=0&limit=100", 0),
                ("cold", "partition=0&limit=100&start=offset&offset=0", 0),
            ):
                text = await get(f"/topics/{topic}/messages?{query}")
                tier = "redis" if topic == "hot" else "archive"
                assert text.count(f'class="tier {tier}"') == 100, topic

                async def direct(topic: str = topic, start: int = start) -> None:
                    where = await bounds(layer, topic, 0)
                    first = where.end - 100 if topic == "hot" else start
                    assert len(await read_forward(layer, topic, 0, first, 100, where)) == 100

                page = await timed(
                    lambda t=topic, q=query: get(f"/topics/{t}/messages?{q}"), rounds
                )
                report(f"100 messages from {tier}", page, await timed(direct, rounds), 0.3)

            await lag_delay(log, get, rounds=max(5, rounds // 10))
    finally:
        await runner.cleanup()
        await archive.close()
        await log.stores.close()


async def lag_delay(log: Log, get: Callable[[str], Awaitable[str]], rounds: int) -> None:
    """Commits at random moments while a reader polls the lag fragment every POLL_SECONDS;
    the delay from each commit to the first answer showing it."""
    groups = GroupCoordinator(log)
    await groups.admin.reset_offsets("bench", {("hot", 0): 0})
    delays, direct = [], []
    for i in range(1, rounds + 1):
        phase = random.uniform(0, POLL_SECONDS)
        polling_since = time.perf_counter()
        await asyncio.sleep(phase)
        committed_at = time.perf_counter()
        await groups.admin.reset_offsets("bench", {("hot", 0): i})
        started = time.perf_counter()
        assert (await groups.admin.committed("bench"))[("hot", 0)].offset == i
        direct.append(time.perf_counter() - started)
        # the page's poll: every POLL_SECONDS from when it started
        while True:
            elapsed = time.perf_counter() - polling_since
            await asyncio.sleep(POLL_SECONDS - (elapsed % POLL_SECONDS))
            fragment = await get("/groups/bench/lag")
            if f'id="total-lag">{100 - i}<' in fragment:
                delays.append(time.perf_counter() - committed_at)
                break
    print(
        f"lag on the page after a commit (polled every {POLL_SECONDS:g} s, {rounds} commits): "
        f"max {max(delays):.2f} s, median {statistics.median(delays):.2f} s; reading the "
        f"commit directly {statistics.median(direct) * 1000:.1f} ms; ratio "
        f"{statistics.median(delays) / statistics.median(direct):.0f}x "
        f"(goal < 5 s: {'met' if max(delays) < 5 else 'MISSED'})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kafkaesque-bench-") as tmp:
        home = Path(tmp)
        home.chmod(0o755)
        redis_server = EmbeddedRedis(home / "redis")
        pg = EmbeddedPostgres(home / "pg")
        try:
            dsn = pg.ensure_started()
            asyncio.run(bench(redis_server.ensure_started(), dsn, args.topics, args.rounds))
        finally:
            pg.stop()
            redis_server.stop()


if __name__ == "__main__":
    main()
