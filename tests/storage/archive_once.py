"""One archiver pass in its own process, for the crash test (which SIGKILLs it):

    python -m tests.storage.archive_once REDIS_URL DSN [--wait]

Prints "started" once connected, "done" after the pass; with --wait, the pass begins when
a line arrives on stdin, after switching archiving on (then it prints "switched")."""

from __future__ import annotations

import asyncio
import sys

import redis.asyncio

from kafkaesque.hot.log import Log
from storage_pg import Archiver, create_pool


async def main(url: str, dsn: str, wait: bool) -> None:
    pool = await create_pool(dsn)
    log = Log(redis.asyncio.Redis.from_url(url))
    await log.redis.ping()
    async with pool.acquire() as conn:
        await conn.fetchval("SELECT 1")
    print("started", flush=True)
    if wait:
        await asyncio.to_thread(sys.stdin.readline)
        await log.enable_archiving()  # what the pass does first, made visible to the test
        print("switched", flush=True)
    await Archiver(log, pool, idle_close_ms=0, pages_per_transaction=1).run_once()
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], "--wait" in sys.argv[3:]))
