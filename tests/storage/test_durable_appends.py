"""acks=all's appends on one Redis under appendfsync everysec (kafkaesque/hot/durability.py
``DurableAppends``): concurrent appends share their waits (one WAITAOF covers every append
answered before it) and each is acknowledged once one sent after its reply was met; a
wait that fails fails every append it covered, and they stay written; acks=1's appends
do not queue behind the waits."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import HotTierUnavailable, NotDurable
from kafkaesque.hot.connect import redis_client
from kafkaesque.hot.durability import Durability
from kafkaesque.hot.log import Log
from kafkaesque.records.build import build_batch
from tests.servers import RedisServer

APPENDS = 60


@pytest.fixture(scope="module")
def everysec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("everysec"), appendonly=True)  # everysec
    yield server
    server.stop()


def test_concurrent_appends_share_their_waits(everysec: RedisServer) -> None:
    async def run() -> None:
        redis = redis_client(everysec.url)
        try:
            log = Log(redis)
            await log.create_topic(TopicConfig("t", 2))
            await redis.config_resetstat()
            durable = Durability(fsync=True)
            batches = [build_batch([b"%d" % i]) for i in range(APPENDS)]
            appended = await asyncio.gather(
                *(log.append("t", i % 2, [b], durable) for i, b in enumerate(batches))
            )
            for partition in (0, 1):
                offsets = sorted(a.base_offsets[0] for a in appended[partition::2])
                assert offsets == list(range(APPENDS // 2))  # each once, none lost
            stats = await redis.info("commandstats")
            waits = stats["cmdstat_waitaof"]["calls"]
            assert stats["cmdstat_evalsha"]["calls"] == APPENDS
            assert 1 <= waits < APPENDS  # shared, and never none
            # The waits' connection is not the shared one: acks=1 goes on meanwhile.
            plain = await log.append("t", 0, [build_batch([b"acks=1"])])
            assert plain.base_offsets == [APPENDS // 2]
        finally:
            await redis.aclose()

    asyncio.run(run())


def test_a_failed_wait_fails_every_append_it_covered(everysec: RedisServer) -> None:
    """No replica answers WAIT 1: each append is told NotDurable, and stays written."""

    async def run() -> None:
        redis = redis_client(everysec.url)
        try:
            log = Log(redis)
            await log.create_topic(TopicConfig("f", 1))
            durable = Durability(fsync=True, replicas=1)
            # The replica check in append.lua refuses before writing when none is in
            # sync: bypass it as a replica that stops answering after the check would.
            waits = log.appends._durable_appends()
            assert waits is not None
            keys, args = log.appends._append_call("f", 0, [build_batch([b"x"])])
            outcomes = await asyncio.gather(
                *(waits.append(durable, 200, keys, list(args)) for _ in range(5)),
                return_exceptions=True,
            )
            assert all(isinstance(o, NotDurable) for o in outcomes), outcomes
            assert "0 of 1 Redis replicas" in str(outcomes[0])
            assert (await log.state("f", 0)).log_end == 5  # appended all the same
            # The next append goes through (nothing left held back).
            appended = await log.append("f", 0, [build_batch([b"y"])], Durability(fsync=True))
            assert appended.base_offsets == [5]
        finally:
            await redis.aclose()

    asyncio.run(run())


def test_a_lost_connection_fails_its_appends_and_the_next_go_through(
    everysec: RedisServer,
) -> None:
    """Redis drops acks=all's connection with appends and a wait on it: those fail or
    succeed, none is acknowledged twice or lost, and the next appends reconnect."""

    async def run() -> None:
        redis = redis_client(everysec.url)
        try:
            log = Log(redis)
            await log.create_topic(TopicConfig("k", 1))
            durable = Durability(fsync=True)
            await log.append("k", 0, [build_batch([b"first"])], durable)
            waits = log.appends._durable_appends()
            assert waits is not None
            client_id = await waits.connection.execute("CLIENT", "ID")

            async def kill() -> None:
                await redis.execute_command("CLIENT", "KILL", "ID", client_id)

            outcomes = await asyncio.gather(
                *(log.append("k", 0, [build_batch([b"%d" % i])], durable) for i in range(20)),
                kill(),
                return_exceptions=True,
            )
            acknowledged = [
                o.base_offsets[0] for o in outcomes[:20] if not isinstance(o, Exception)
            ]
            failed = [o for o in outcomes[:20] if isinstance(o, Exception)]
            assert all(isinstance(o, HotTierUnavailable) for o in failed), failed
            assert len(set(acknowledged)) == len(acknowledged)  # no offset given twice
            end = (await log.state("k", 0)).log_end
            assert all(1 <= offset < end for offset in acknowledged)  # each one is there
            again = await log.append("k", 0, [build_batch([b"after"])], durable)
            assert again.base_offsets == [end]
        finally:
            await redis.aclose()

    asyncio.run(run())
