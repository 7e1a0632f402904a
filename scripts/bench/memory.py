"""Redis memory per record: what the log keeps per stored record of 100 bytes, against
the bytes of the record batches themselves (the floor of an uncompressed log: Kafka's
RecordBatch v2, which the pages keep as sent).

On a private server (``--server``, as scripts/bench/redis_servers.py starts it), appends
``--records`` (default 1,000,000) records of ``--value`` bytes (default 100, random, no
key) in batches of ``--batch`` (default 1000) through ``Log.append`` to one partition,
then prints Redis' used_memory per record (INFO memory, after minus before), the batch
bytes per record, and Redis' own overhead per record (the difference: list entries, the
batch index's 16 bytes per batch, the page hashes). Values are random: uncompressed.

    python scripts/bench/memory.py [--records N] [--value B] [--batch N] [--server S]
"""

from __future__ import annotations

import argparse
import asyncio
import os

from redis_servers import add_server_option, running_server

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.connect import open_log
from kafkaesque.records.build import build_batch


async def per_record(url: str, records: int, value: int, batch: int) -> str:
    """One topic's appends on the server at ``url``: the line to print."""
    log = open_log(url)
    try:
        topic = "memory"
        await log.create_topic(TopicConfig(topic, 1))
        batches = [
            build_batch([os.urandom(value) for _ in range(batch)], timestamp=1_700_000_000_000)
            for _ in range(records // batch)
        ]
        await log.redis.execute_command("MEMORY", "PURGE")
        before = int((await log.redis.info("memory"))["used_memory"])
        for one in batches:
            await log.append(topic, 0, [one])
        after = int((await log.redis.info("memory"))["used_memory"])
        stored = sum(map(len, batches))
        n = len(batches) * batch
        return (
            f"Redis {(after - before) / n:6.1f} B per record   the batches"
            f" {stored / n:6.1f} B   Redis' own {(after - before - stored) / n:5.1f} B"
        )
    finally:
        await log.redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000)
    add_server_option(parser)
    args = parser.parse_args()
    print(f"{args.records:,} records of {args.value} random bytes, {args.batch} per batch")
    with running_server(args.server, "ks-memory-") as url:
        print(asyncio.run(per_record(url, args.records, args.value, args.batch)))


if __name__ == "__main__":
    main()
