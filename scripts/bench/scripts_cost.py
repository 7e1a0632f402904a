"""Redis' own time per call of the log's hot scripts, against the raw commands that move
the same bytes (the baseline), on one server in one run: `INFO commandstats` usec per
call, the median of alternating rounds.

- append: append.lua with one one-record batch (a linger-0 producer's request), against
  an RPUSH of the same batch;
- tail read: read_many.lua of one partition at its newest batch (a caught-up consumer's
  fetch after an append), against an LRANGE of that batch;
- 64 KiB read: read_many.lua of the small batches that fill 64 KiB, from the middle of a
  page of 3,000, against an LRANGE of the same batches;
- 1 MB append: append.lua with one batch of 9,000 records (a batching producer's request),
  sent as the client built it (baseOffset 0, no epoch: the script rewrites both) and as
  Log.append sends it (both already written in: kafkaesque/hot/log_appends.py
  OffsetGuesses), against an
  RPUSH of it; fewer calls (--big-calls), each round on a new topic.

    python scripts/bench/scripts_cost.py [--rounds N] [--calls N] [--big-calls N]
                                         [--server NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import redis
from redis_servers import add_server_option, running_server

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.connect import open_log
from kafkaesque.hot.log import Log
from kafkaesque.hot.scripts import source
from kafkaesque.records.batch import offset_count, with_base_offset
from kafkaesque.records.build import build_batch

BATCHES = 3000  # one-record batches in the page read (a page holds 4,096 by default)
BIG_RECORDS = 9000  # of 100 bytes: a batch of ~1 MB, librdkafka's default batch.size


def usec_per_call(r: redis.Redis, command: str, calls: int, send: Callable[[], None]) -> float:
    """Redis' time per call of ``command`` over ``calls`` calls that ``send`` queues."""
    r.config_resetstat()
    send()
    return float(r.info("commandstats")[f"cmdstat_{command}"]["usec_per_call"])


async def fill(url: str, batch: bytes) -> None:
    log = open_log(url)
    await log.create_topic(TopicConfig("read", 1))
    await log.create_topic(TopicConfig("append", 1))
    for _ in range(BATCHES):
        await log.append("read", 0, [batch])
    await log.append("append", 0, [batch])
    await log.redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--big-calls", type=int, default=50)
    add_server_option(parser)
    args = parser.parse_args()
    batch = build_batch([b"v" * 100])
    with running_server(args.server, "scripts-bench-") as url:
        asyncio.run(fill(url, batch))
        r = redis.Redis.from_url(url)
        log = open_log(url)
        keys = log.keys
        read_meta = keys.partition("read", 0).meta
        page = f"{keys.partition('read', 0).prefix}page:0"
        scratch = f"{keys.partition('append', 0).prefix}scratch"
        append_sha = r.script_load(source("append"))
        read_sha = r.script_load(source("read_many"))
        per_64k = 65536 // len(batch)
        keys_, args_ = log.appends._append_call("append", 0, [batch])  # as Log.append calls it
        append_call = ("EVALSHA", append_sha, len(keys_), *keys_, *args_)

        def pipeline(*command: object) -> Callable[[], None]:
            def send() -> None:
                p = r.pipeline(transaction=False)
                for _ in range(args.calls):
                    p.execute_command(*command)
                p.execute()

            return send

        cases = {
            "append of one record": (
                ("evalsha", pipeline(*append_call)),
                ("rpush", pipeline("RPUSH", scratch, batch)),
            ),
            "tail read": (
                ("evalsha", pipeline("EVALSHA", read_sha, 1, read_meta, 50 << 20, 0, 1,
                                     BATCHES - 1, 1 << 20)),
                ("lrange", pipeline("LRANGE", page, BATCHES - 1, BATCHES - 1)),
            ),
            "64 KiB read": (
                ("evalsha", pipeline("EVALSHA", read_sha, 1, read_meta, 50 << 20, 0, 1,
                                     BATCHES // 2, 65536)),
                ("lrange", pipeline("LRANGE", page, BATCHES // 2,
                                    BATCHES // 2 + per_64k - 1)),
            ),
        }  # fmt: skip
        print(f"Redis time per call (median of {args.rounds} rounds of {args.calls:,} calls)")
        for name, ((script, run_script), (raw, run_raw)) in cases.items():
            scripted: list[float] = []
            baseline: list[float] = []
            for _ in range(args.rounds):
                scripted.append(usec_per_call(r, script, args.calls, run_script))
                baseline.append(usec_per_call(r, raw, args.calls, run_raw))
            s, b = statistics.median(scripted), statistics.median(baseline)
            print(f"{name:22s} script {s:8.1f} us   {raw.upper()} of the same bytes {b:6.1f} us"
                  f"   ratio {s / b:5.1f}")  # fmt: skip
        big_appends(r, log, url, append_sha, args.rounds, args.big_calls)


def big_appends(
    r: redis.Redis, log: Log, url: str, append_sha: str, rounds: int, calls: int
) -> None:
    """Redis time per append of a ~1 MB batch: as built, and with its offset and epoch
    already in place, against an RPUSH of it (medians of alternating rounds)."""
    batch = build_batch([b"v" * 100] * BIG_RECORDS)
    count = offset_count(batch)
    times: dict[str, list[float]] = {"as built": [], "placed": [], "rpush": []}

    async def create(name: str) -> int:
        """A new topic of one partition; its leader epoch."""
        log = open_log(url)
        await log.create_topic(TopicConfig(name, 1))
        epoch = await log.redis.hget(log.keys.partition(name, 0).meta, "epoch")
        await log.redis.aclose()
        return int(epoch or 0)

    async def delete(name: str) -> None:
        log = open_log(url)
        await log.delete_topic(name)
        await log.redis.aclose()

    for i in range(rounds):
        for mode in ("as built", "placed"):
            name = f"big-{i}-{mode.replace(' ', '-')}"
            epoch = asyncio.run(create(name))
            p = r.pipeline(transaction=False)
            for n in range(calls):
                sent = batch if mode == "as built" else with_base_offset(batch, n * count, epoch)
                keys, call_args = log.appends._append_call(name, 0, [sent])
                p.execute_command("EVALSHA", append_sha, len(keys), *keys, *call_args)
            times[mode].append(usec_per_call(r, "evalsha", calls, p.execute))
            asyncio.run(delete(name))
        p = r.pipeline(transaction=False)
        for _ in range(calls):
            p.rpush("big-scratch", batch)
        times["rpush"].append(usec_per_call(r, "rpush", calls, p.execute))
        r.delete("big-scratch")
    medians = {mode: statistics.median(t) for mode, t in times.items()}
    print(
        f"1 MB append, as built  script {medians['as built']:8.1f} us   RPUSH of it"
        f" {medians['rpush']:6.1f} us   ratio {medians['as built'] / medians['rpush']:5.1f}"
    )
    print(
        f"1 MB append, placed    script {medians['placed']:8.1f} us   RPUSH of it"
        f" {medians['rpush']:6.1f} us   ratio {medians['placed'] / medians['rpush']:5.1f}"
    )


if __name__ == "__main__":
    main()
