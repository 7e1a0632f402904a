"""One Redis connection shared by every concurrent caller, its commands pipelined.

A call writes its command at once and waits for its reply; replies come back in the order
the commands were written, so they are matched to callers first in, first out. Compared
with a pool (a connection taken, one command, the connection given back) a call costs a
fraction of the Python work, commands written together leave in one send, and Redis runs
two calls in the order they were made (it runs a connection's commands in arrival order).

Only for commands that answer at once: a blocking command, WAIT or SUBSCRIBE would hold up
every caller behind it. The connection is set up (address, TLS, AUTH, SELECT) by the
client's own pool, so it reaches the same server as the client's other commands.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Sequence
from typing import Any

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError, InvalidResponse, ResponseError

READ_SIZE = 1 << 16
# Bytes written and not yet taken by the socket above which a caller waits for the send
# buffer to drain: a Redis that stops reading holds back its callers, not our memory.
HIGH_WATER = 4 << 20

Arg = bytes | str | int | float | memoryview


def pack(args: Sequence[Arg]) -> bytes:
    """One command in the Redis protocol (RESP): an array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, int):
            arg = b"%d" % arg
        elif isinstance(arg, float):
            arg = repr(arg).encode()
        parts += (b"$%d\r\n" % len(arg), arg, b"\r\n")
    return b"".join(parts)


class ConnectionClosed(ConnectionError):
    """Redis closed a connection (it stopped, restarted, or dropped the client)."""


def reply_parser() -> hiredis.Reader:
    """A RESP parser whose error replies are redis-py's exceptions (NoScriptError...)."""
    return hiredis.Reader(protocolError=InvalidResponse, replyError=BaseParser.parse_error)


async def reply_batches(reader: asyncio.StreamReader) -> AsyncIterator[list[Any]]:
    """The replies arriving on a connection, as many as each read brings at a time;
    ConnectionError when it closes. Much less work per reply than redis-py's reads, for
    the connections that carry one reply per record: the shared one and pub/sub."""
    parser = reply_parser()
    while True:
        data = await reader.read(READ_SIZE)
        if not data:
            raise ConnectionClosed("Connection closed by server.")
        parser.feed(data)
        batch = []
        while (reply := parser.gets()) is not False:
            batch.append(reply)
        if batch:
            yield batch


class PipelinedConnection:
    """The shared connection of one client (see the module's text). Failures are redis-py's
    exceptions: a ResponseError subclass for an error reply (NoScriptError...), a
    ConnectionError for a lost connection, which fails every call waiting on it; the next
    call connects again."""

    def __init__(self, client: Redis) -> None:
        self._pool = client.connection_pool
        self._connection: AbstractConnection | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connecting: asyncio.Lock | None = None

    async def execute(self, *args: Arg) -> Any:
        """Send one command; its reply."""
        writer = self._writer
        if writer is None or self._loop is not asyncio.get_running_loop():
            writer = await self._connect()
        future = self._loop.create_future()  # type: ignore[union-attr]
        self._waiting.append(future)
        writer.write(pack(args))
        if writer.transport.get_write_buffer_size() > HIGH_WATER:
            await self._drain(writer)
        return await future

    async def execute_many(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Send the commands back to back, in order; one reply per command, an error
        reply as its exception (not raised). A lost connection is raised."""
        writer = self._writer
        if writer is None or self._loop is not asyncio.get_running_loop():
            writer = await self._connect()
        loop = self._loop
        futures = [loop.create_future() for _ in commands]  # type: ignore[union-attr]
        self._waiting.extend(futures)
        writer.write(b"".join(pack(command) for command in commands))
        if writer.transport.get_write_buffer_size() > HIGH_WATER:
            await self._drain(writer)
        replies: list[Any] = []
        for future in futures:
            try:
                replies.append(await future)
            except ResponseError as exc:
                replies.append(exc)
        return replies

    async def aclose(self) -> None:
        """Close the connection; calls waiting on it fail."""
        if self._reader_task is not None and self._loop is asyncio.get_running_loop():
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)
        self._closed(ConnectionError("connection closed"))

    async def _drain(self, writer: asyncio.StreamWriter) -> None:
        try:
            await writer.drain()
        except OSError as exc:  # the reader fails the waiting calls too
            raise ConnectionError(f"Error writing to Redis: {exc}") from exc

    async def _connect(self) -> asyncio.StreamWriter:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop (tests): nothing carries over
            self._closed(ConnectionError("event loop changed"))
            self._loop, self._connecting = loop, asyncio.Lock()
        async with self._connecting:  # type: ignore[union-attr]
            if self._writer is not None:
                return self._writer
            connection = self._pool.make_connection()
            await connection.connect()
            reader, writer = connection._reader, connection._writer
            if reader is None or writer is None:
                raise ConnectionError("Redis connection has no stream")
            self._connection, self._writer = connection, writer
            self._reader_task = loop.create_task(self._read(reader), name="redis pipeline")
            return writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        """Match replies to the waiting calls, in order, until the connection fails."""
        waiting = self._waiting
        try:
            async for batch in reply_batches(reader):
                for reply in batch:
                    future = waiting.popleft()
                    if future.done():  # its caller was cancelled; the order holds
                        continue
                    if isinstance(reply, ResponseError):
                        future.set_exception(reply)
                    else:
                        future.set_result(reply)
        except asyncio.CancelledError:
            raise
        except (OSError, ConnectionError, InvalidResponse, IndexError) as exc:
            failure = exc if isinstance(exc, ConnectionError) else ConnectionError(str(exc))
            self._closed(failure)

    def _closed(self, failure: ConnectionError) -> None:
        """Drop the connection and fail every call waiting on it."""
        writer, self._writer = self._writer, None
        self._connection = None
        if writer is not None:
            writer.transport.abort()
        waiting, self._waiting = self._waiting, collections.deque()
        for future in waiting:
            if not future.done():
                future.set_exception(failure)
