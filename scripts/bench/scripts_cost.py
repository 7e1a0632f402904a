"""Redis' own time per call of the log's hot scripts, against the raw commands that move
the same bytes (the baseline), on one server in one run: `INFO commandstats` usec per
call, the median of alternating rounds.

- append: append.lua with one one-record batch (a linger-0 producer's request), against
  an RPUSH of the same batch;
- tail read: read_many.lua of one partition at its newest batch (a caught-up consumer's
  fetch after an append), against an LRANGE of that batch;
- 64 KiB read: read_many.lua of the small batches that fill 64 KiB, from the middle of a
  page of 3,000, against an LRANGE of the same batches.

    python scripts/bench/scripts_cost.py [--rounds N] [--calls N] [--server NAME]
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

from kafkaesque.batch_build import build_batch
from kafkaesque.connect import redis_client
from kafkaesque.log import Log
from kafkaesque.scripts import source
from kafkaesque.topic_config import TopicConfig

BATCHES = 3000  # one-record batches in the page read (a page holds 4,096 by default)


def usec_per_call(r: redis.Redis, command: str, calls: int, send: Callable[[], None]) -> float:
    """Redis' time per call of ``command`` over ``calls`` calls that ``send`` queues."""
    r.config_resetstat()
    send()
    return float(r.info("commandstats")[f"cmdstat_{command}"]["usec_per_call"])


async def fill(url: str, batch: bytes) -> None:
    log = Log(redis_client(url))
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
    add_server_option(parser)
    args = parser.parse_args()
    batch = build_batch([b"v" * 100])
    with running_server(args.server, "scripts-bench-") as url:
        asyncio.run(fill(url, batch))
        r = redis.Redis.from_url(url)
        log = Log(redis_client(url))
        keys = log.keys
        read_meta = keys.partition("read", 0).meta
        page = f"{keys.partition('read', 0).prefix}page:0"
        scratch = f"{keys.partition('append', 0).prefix}scratch"
        append_sha = r.script_load(source("append"))
        read_sha = r.script_load(source("read_many"))
        per_64k = 65536 // len(batch)
        keys_, args_ = log._append_call("append", 0, [batch])  # as Log.append calls it
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


if __name__ == "__main__":
    main()
