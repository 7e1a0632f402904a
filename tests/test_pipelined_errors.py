"""The shared pipelined connection hands Redis' error replies on as redis-py would: a
command's error (WRONGTYPE...) as that command's failure, a Redis still loading its data
after a restart (LOADING) as BusyLoadingError, which callers treat as Redis being away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import hiredis
import pytest
import redis.asyncio
from redis.exceptions import BusyLoadingError, ResponseError

from kafkaesque.hot.pipelined import PipelinedConnection, pack, reply_batches
from kafkaesque.hot.redis_errors import describe_redis_error

LOADING = b"-LOADING Redis is loading the dataset in memory\r\n"


async def fake_redis(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers GET with WRONGTYPE, EVALSHA and HGET with LOADING, the rest (redis-py's
    connection setup) with OK."""
    parser = hiredis.Reader()
    while data := await reader.read(1 << 16):
        parser.feed(data)
        while (command := parser.gets()) is not False:
            name = command[0].upper()
            if name == b"GET":
                writer.write(b"-WRONGTYPE Operation against a key holding the wrong kind\r\n")
            elif name in (b"EVALSHA", b"HGET"):
                writer.write(LOADING)
            else:
                writer.write(b"+OK\r\n")
    writer.close()


async def connection() -> AsyncIterator[PipelinedConnection]:
    server = await asyncio.start_server(fake_redis, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = redis.asyncio.Redis.from_url(f"redis://127.0.0.1:{port}")
    shared = PipelinedConnection(client)
    try:
        yield shared
    finally:
        await shared.aclose()
        await client.aclose()
        server.close()


def test_a_loading_redis_is_raised_and_command_errors_are_returned() -> None:
    async def scenario() -> None:
        async for shared in connection():
            with pytest.raises(BusyLoadingError):
                await shared.execute("EVALSHA", "0" * 40, 0)
            with pytest.raises(ResponseError, match="WRONGTYPE"):
                await shared.execute("GET", "k")
            # Several at once: a command's error is its reply; LOADING fails them all.
            replies = await shared.execute_many([("GET", "a"), ("GET", "b")])
            assert [type(r) for r in replies] == [ResponseError, ResponseError]
            with pytest.raises(BusyLoadingError):
                await shared.execute_packed(pack(("GET", "a")) + pack(("HGET", "h", "f")), 2)
            # The connection still serves in order after all of that.
            with pytest.raises(ResponseError, match="WRONGTYPE"):
                await shared.execute("GET", "k")

    asyncio.run(scenario())


def test_an_error_reply_on_a_subscription_is_raised() -> None:
    async def scenario() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(b"*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$1\r\nc\r\n$1\r\n1\r\n" + LOADING)
        batches = reply_batches(reader)
        with pytest.raises(BusyLoadingError):
            await anext(batches)

    asyncio.run(scenario())


def test_a_redis_that_closes_every_connection_is_named_in_the_failure() -> None:
    """A Redis shutting down closes the shared connection, then accepts new ones and
    closes them: the call fails naming the server and why, as a refused connect does."""

    async def scenario() -> None:
        closing = False

        async def shutting_down(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal closing
            parser = hiredis.Reader()
            while not closing and (data := await reader.read(1 << 16)):
                parser.feed(data)
                while (command := parser.gets()) is not False:
                    if command[0].upper() == b"GET":
                        closing = True  # no answer: the connection closes under the call
                        break
                    writer.write(b"+OK\r\n")
            writer.close()

        server = await asyncio.start_server(shutting_down, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = redis.asyncio.Redis.from_url(f"redis://127.0.0.1:{port}")
        shared = PipelinedConnection(client)
        try:
            assert await shared.execute("SET", "k", "v") == b"OK"
            with pytest.raises(redis.ConnectionError) as failure:
                await shared.execute("GET", "k")
            assert str(failure.value) == f"127.0.0.1:{port} (connection closed by server)"
            assert describe_redis_error(failure.value) == str(failure.value)
        finally:
            await shared.aclose()
            await client.aclose()
            server.close()

    asyncio.run(scenario())
