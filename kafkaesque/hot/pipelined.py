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
import contextlib
import contextvars
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio import Redis
from redis.exceptions import ConnectionError, InvalidResponse, RedisError

READ_SIZE = 1 << 16
# Bytes written and not yet taken by the socket above which a caller waits for the send
# buffer to drain: a Redis that stops reading holds back its callers, not our memory.
HIGH_WATER = 4 << 20
# How long a call whose connection Redis closed waits for a new one to say why (_closed).
RETRY_TIMEOUT = 2.0


class Pieces(tuple[bytes | memoryview, ...]):
    """One argument given as the consecutive pieces it is made of (a batch whose first
    bytes are replaced: kafkaesque.hot.log_appends), joined only where the command is
    packed: the argument is not copied once more to be one bytes object first."""

    __slots__ = ()


Arg = bytes | str | int | float | memoryview | Pieces

# Called when an ordered command (an append: ``ordered=True``) has been written to the
# shared connection, in the context that wrote it: the broker's next request on a client
# connection may then start, its appends queued behind (wire/net/connection.py).
WRITTEN: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "written", default=None
)


# Commands whose packed heads CommandHeads keeps: one per partition appended to (a head is
# about 400 bytes), the oldest dropped past this.
MAX_HEADS = 10_000


def pack(args: Sequence[Arg]) -> bytes:
    """One command in the Redis protocol (RESP): an array of bulk strings."""
    parts: list[bytes | memoryview] = [b"*%d\r\n" % len(args)]
    add_items(parts, args)
    return b"".join(parts)  # the one copy of a batch argument


def add_items(parts: list[bytes | memoryview], args: Sequence[Arg]) -> None:
    """Append ``args`` to ``parts`` as RESP bulk strings: a part of a command."""
    append = parts.append
    small = _SMALL_INTS.get
    for arg in args:
        kind = type(arg)  # exact types first: isinstance chains cost most of a command
        if kind is int:
            packed = small(arg)  # type: ignore[arg-type]
            if packed is None:
                # ``kind is int`` does not narrow ``arg`` for the checker; isinstance would
                # cost (above)
                packed = _bulk(b"%d" % arg)  # type: ignore[str-format]
            append(packed)
        elif kind is str:
            append(_bulk(arg.encode()))  # type: ignore[union-attr]
        elif kind is bytes or kind is memoryview:
            append(b"$%d\r\n" % len(arg))  # type: ignore[arg-type]
            append(arg)  # type: ignore[arg-type]
            append(b"\r\n")
        elif kind is Pieces:
            append(b"$%d\r\n" % sum(map(len, arg)))  # type: ignore[arg-type]
            parts.extend(arg)  # type: ignore[arg-type]
            append(b"\r\n")
        elif isinstance(arg, str):
            append(_bulk(arg.encode()))
        elif isinstance(arg, int):
            append(_bulk(b"%d" % arg))
        elif isinstance(arg, float):
            append(_bulk(repr(arg).encode()))
        elif isinstance(arg, Pieces):  # a subclass of it
            append(_bulk(b"".join(arg)))
        else:
            append(_bulk(bytes(arg)))


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(value), value)


# The small ints of an append (offset counts, -1 for no producer, 0 floors) packed once.
_SMALL_INTS = {i: _bulk(b"%d" % i) for i in range(-1, 1024)}


class CommandHeads:
    """Commands whose first arguments repeat (a script's EVALSHA, SHA and keys, the same
    for every append to a partition), packed once: a command is then its header, the
    packed head and the few arguments that vary. Keyed by the head's own values, so an
    entry is never stale; bounded by dropping the oldest (MAX_HEADS)."""

    def __init__(self, limit: int = MAX_HEADS) -> None:
        self.limit = limit
        self._packed: dict[tuple[Arg, ...], tuple[int, bytes]] = {}

    def command(self, head: tuple[Arg, ...], rest: Sequence[Arg]) -> bytes:
        """The packed command ``*head, *rest``."""
        found = self._packed.get(head)
        if found is None:
            if len(self._packed) >= self.limit:
                del self._packed[next(iter(self._packed))]
            items: list[bytes | memoryview] = []
            add_items(items, head)
            found = self._packed[head] = (len(head), b"".join(items))
        size, packed = found
        parts: list[bytes | memoryview] = [b"*%d\r\n" % (size + len(rest)), packed]
        add_items(parts, rest)
        return b"".join(parts)

    def __len__(self) -> int:
        return len(self._packed)


class ConnectionClosed(ConnectionError):
    """Redis closed a connection (it stopped, restarted, or dropped the client)."""


def reply_parser() -> hiredis.Reader:
    """A RESP parser whose error replies are redis-py's exceptions (NoScriptError...)."""
    return hiredis.Reader(protocolError=InvalidResponse, replyError=BaseParser.parse_error)


async def reply_batches(reader: asyncio.StreamReader) -> AsyncIterator[list[Any]]:
    """The replies arriving on a connection, as many as each read brings at a time;
    ConnectionError when it closes, an error reply raised. Much less work per reply than
    redis-py's reads, for the connections that carry one reply per record: the shared one
    and pub/sub."""
    parser = reply_parser()
    while True:
        data = await reader.read(READ_SIZE)
        if not data:
            raise ConnectionClosed("Connection closed by server.")
        parser.feed(data)
        batch = []
        while (reply := parser.gets()) is not False:
            if isinstance(reply, Exception):  # an error reply: no message to hand on
                raise reply
            batch.append(reply)
        if batch:
            yield batch


class _Replies(asyncio.Protocol):
    """The shared connection's protocol, in place of redis-py's stream once it is set up:
    each reply resolves the oldest waiting call. Replies are parsed as they arrive, with
    no stream buffer between the socket and the parser (a fetch's 1 MiB reply was copied
    three times through one)."""

    def __init__(self, owner: PipelinedConnection) -> None:
        self.owner = owner
        self.parser = reply_parser()
        self.waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.paused = False  # the transport holds more than its high-water mark
        self.drained: list[asyncio.Future[None]] = []

    def data_received(self, data: bytes) -> None:
        parser, waiting = self.parser, self.waiting
        parser.feed(data)
        try:
            while (reply := parser.gets()) is not False:
                future = waiting.popleft()
                if future.done():  # its caller was cancelled; the order holds
                    continue
                # Error replies are exceptions: ResponseError subclasses, but LOADING (a
                # restarted Redis reading its data) is BusyLoadingError, a ConnectionError.
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
        except (InvalidResponse, IndexError) as exc:  # garbage, or a reply nobody asked for
            self.owner._closed(self, ConnectionError(f"Redis protocol error: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f": {exc}" if exc else ""
        self.owner._closed(self, ConnectionClosed(f"Connection closed by server{reason}."))
        self.resume_writing()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        drained, self.drained = self.drained, []
        for future in drained:
            if not future.done():
                future.set_result(None)


class PipelinedConnection:
    """The shared connection of one client (see the module's text). Failures are redis-py's
    exceptions: a ResponseError subclass for an error reply (NoScriptError...), a
    ConnectionError for a lost connection, which fails every call waiting on it; the next
    call connects again."""

    def __init__(self, client: Redis) -> None:
        self._pool = client.connection_pool
        self._transport: asyncio.Transport | None = None
        # redis-py's connection object: kept, since it closes its socket when collected.
        self._connection: Any = None
        self._protocol: _Replies | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connecting: asyncio.Lock | None = None
        self._preloaded: dict[str, None] = {}  # scripts loaded on every new connection
        self._explaining: set[asyncio.Task[None]] = set()  # see _closed

    def preload(self, script: str) -> None:
        """Load ``script`` whenever the connection is made, before any call: calls of it
        then never meet NOSCRIPT, whose retry would run them out of order."""
        self._preloaded[script] = None

    async def execute(self, *args: Arg, ordered: bool = False) -> Any:
        """Send one command; its reply. ``ordered``: tell WRITTEN once it is written."""
        return await self.execute_one(pack(args), ordered)

    async def execute_one(self, packed: bytes, ordered: bool = False) -> Any:
        """``execute`` of one command the caller packed itself (see CommandHeads)."""
        protocol = self._protocol
        if protocol is None or self._loop is not asyncio.get_running_loop():
            protocol = await self._connect()
        future = self._loop.create_future()  # type: ignore[union-attr]
        protocol.waiting.append(future)
        await self._write(protocol, packed, ordered)
        return await future

    async def execute_many(
        self, commands: Sequence[Sequence[Arg]], ordered: bool = False
    ) -> list[Any]:
        """Send the commands back to back, in order; one reply per command, an error
        reply as its exception (not raised). A lost connection, or a Redis still loading
        its data, is raised. ``ordered``:
        tell WRITTEN once they are written."""
        packed = b"".join(pack(command) for command in commands)
        return await self.execute_packed(packed, len(commands), ordered)

    async def execute_packed(self, packed: bytes, count: int, ordered: bool = False) -> list[Any]:
        """``execute_many`` of ``count`` commands the caller packed itself (``packed``):
        thousands of one form are packed fastest by formatting the one part that varies."""
        protocol = self._protocol
        if protocol is None or self._loop is not asyncio.get_running_loop():
            protocol = await self._connect()
        loop = self._loop
        futures = [loop.create_future() for _ in range(count)]  # type: ignore[union-attr]
        protocol.waiting.extend(futures)
        await self._write(protocol, packed, ordered)
        replies: list[Any] = []
        for future in futures:  # every one awaited, so no failure goes unretrieved
            try:
                replies.append(await future)
            except RedisError as exc:
                replies.append(exc)
        for reply in replies:  # Redis is away or still loading: not a reply to hand on
            if isinstance(reply, ConnectionError):
                raise reply
        return replies

    async def aclose(self) -> None:
        """Close the connection; calls waiting on it fail."""
        if self._protocol is not None:
            self._closed(self._protocol, ConnectionError("connection closed"))

    async def _write(self, protocol: _Replies, packed: bytes, ordered: bool) -> None:
        """Write commands whose reply futures wait already; ``ordered``: tell WRITTEN. Then
        wait while the transport holds more than Redis has taken."""
        self._transport.write(packed)  # type: ignore[union-attr]
        written = WRITTEN.get() if ordered else None
        if written is not None:
            written()
        if protocol.paused:
            await self._drain(protocol)

    async def _drain(self, protocol: _Replies) -> None:
        """Wait until the transport has sent what Redis was slow to take."""
        future = self._loop.create_future()  # type: ignore[union-attr]
        protocol.drained.append(future)
        await future

    async def _connect(self) -> _Replies:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop (tests): nothing carries over
            if self._protocol is not None:
                self._closed(self._protocol, ConnectionError("event loop changed"))
            self._loop, self._connecting = loop, asyncio.Lock()
        async with self._connecting:  # type: ignore[union-attr]
            if self._protocol is not None:
                return self._protocol
            # redis-py sets the connection up (TLS, AUTH, SELECT), then it is ours.
            connection = self._pool.make_connection()
            await connection.connect()
            writer = connection._writer
            if writer is None:
                raise ConnectionError("Redis connection has no stream")
            transport = writer.transport
            protocol = _Replies(self)
            transport.set_protocol(protocol)
            transport.set_write_buffer_limits(high=HIGH_WATER)
            _grow_send_buffer(transport)
            self._transport, self._protocol = transport, protocol
            self._connection = connection
            if self._preloaded:
                loads = [("SCRIPT", "LOAD", script) for script in self._preloaded]
                for reply in await self.execute_many(loads):
                    if isinstance(reply, Exception):
                        raise reply
            return protocol

    def _closed(self, protocol: _Replies, failure: ConnectionError) -> None:
        """Drop the connection of ``protocol`` (if still the current one) and fail every
        call waiting on it. When Redis closed it, the calls fail once a new connection
        was tried: with its error (refused, unknown host...) if Redis is away, which
        says why better than "closed"."""
        if protocol is self._protocol:
            transport, self._transport, self._protocol = self._transport, None, None
            self._connection = None
            if transport is not None:
                transport.abort()
        waiting, protocol.waiting = protocol.waiting, collections.deque()
        if not waiting:
            return
        if isinstance(failure, ConnectionClosed) and self._loop is not None:
            task = self._loop.create_task(self._fail_after_retry(waiting, failure))
            self._explaining.add(task)
            task.add_done_callback(self._explaining.discard)
            return
        _fail(waiting, failure)

    async def _fail_after_retry(
        self, waiting: collections.deque[asyncio.Future[Any]], failure: ConnectionError
    ) -> None:
        probe = self._pool.make_connection()  # its own: a failure here starts no retry
        try:
            async with asyncio.timeout(RETRY_TIMEOUT):
                # A Redis shutting down may still accept a connection and then close it:
                # only an answered PING says it is there.
                await probe.connect()
                await probe.send_command("PING")
                await probe.read_response()
        except (RedisError, OSError, TimeoutError) as exc:
            text = str(exc).rstrip(".") or type(exc).__name__
            if isinstance(exc, ConnectionError) and text.startswith("Error "):
                failure = exc  # redis-py's "Error 111 connecting to HOST:PORT. Why."
            else:
                # Said as redis-py's connect errors are (redis_errors.describe_redis_error),
                # so the outage's one log line names the server: "HOST:PORT (why)".
                if isinstance(exc, TimeoutError):
                    text = f"no new connection within {RETRY_TIMEOUT:g} s"
                where = getattr(probe, "path", "") or f"{probe.host}:{probe.port}"
                failure = ConnectionError(f"{where} ({text[:1].lower()}{text[1:]})")
        finally:
            await probe.disconnect()
        _fail(waiting, failure)


def _grow_send_buffer(transport: asyncio.Transport) -> None:
    """Let the socket take a whole append of a 1 MB batch at once: with the default
    buffer (208 KiB on a Unix socket) asyncio sent it in five pieces, each after a turn
    of the event loop (kcat produced 700k-820k records/s, 860k-915k with this)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, HIGH_WATER)


def _fail(waiting: collections.deque[asyncio.Future[Any]], failure: ConnectionError) -> None:
    for future in waiting:
        if not future.done():
            future.set_exception(failure)
