"""A client connection's socket as one asyncio protocol, in place of a StreamReader and
StreamWriter pair: received bytes stay the chunks the transport handed over (a request
within one chunk is a view of it, not copied into a stream buffer and out again), and
answers written in one event-loop turn go out in one send. Also the limits on a
connection's reads: one deadline per connection (``ReadDeadline``) and the read of a
request's body within it (``read_body``)."""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

# Received bytes held before the socket is read no further (asyncio's StreamReader: twice
# its 64 KiB limit), and the level at which reading resumes.
HIGH_WATER = 128 << 10
LOW_WATER = 64 << 10
# Answer bytes gathered before they are written without waiting for the end of the turn;
# a piece this large is written as it is, not copied into a join.
FLUSH_AT = 64 << 10


class ClientStream(asyncio.Protocol):
    """Reads (``read``, ``readexactly``, and ``take_now`` for what is already here) and
    writes (``write``, ``drain``, ``close``) of one connection. ``serve`` runs as the
    connection's task once it is made."""

    def __init__(self, serve: Callable[[ClientStream], Coroutine[Any, Any, None]]) -> None:
        self._serve = serve
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # connection_made
        self._task: asyncio.Task[None] | None = None
        # Reading: the chunks received, ``_offset`` bytes of the first already taken.
        self._chunks: deque[bytes] = deque()
        self._offset = 0
        self.buffered = 0
        self._eof = False
        self._exception: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        # Writing: answers of this turn not yet handed to the transport.
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._flush_scheduled = False
        self._writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._lost = False
        self._closed: asyncio.Future[None] = self._loop.create_future()

    # The transport's side.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._task = self._loop.create_task(self._serve(self))

    def data_received(self, data: bytes) -> None:
        if not data:
            return
        self._chunks.append(data)
        self.buffered += len(data)
        self._wake()
        if self.buffered > HIGH_WATER and not self._reading_paused:
            try:
                self.transport.pause_reading()
            except NotImplementedError:  # a transport that cannot: the buffer just grows
                return
            self._reading_paused = True

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        # A plain socket stays open to answer what was sent before the client's half-close;
        # TLS has no half-close.
        return self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if exc is None:
            self._eof = True
            self._wake()
        else:
            self.set_exception(exc)
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc or ConnectionResetError("Connection lost"))
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # Reading.

    def set_exception(self, exc: BaseException) -> None:
        """Fail the pending read and every later one with ``exc``."""
        self._exception = exc
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def exception(self) -> BaseException | None:
        return self._exception

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        """Until more bytes, the end of the stream or a failure."""
        if self._exception is not None:
            raise self._exception
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def take_now(self, size: int) -> bytes | memoryview | None:
        """The next ``size`` bytes if they are here (and no failure is), else None."""
        if self.buffered < size or self._exception is not None:
            return None
        return self._take(size)

    async def readexactly(self, size: int) -> bytes | memoryview:
        """The next ``size`` bytes; IncompleteReadError if the stream ends first."""
        while self.buffered < size:
            if self._exception is not None:
                raise self._exception
            if self._eof:
                partial = bytes(self._take(self.buffered)) if self.buffered else b""
                raise asyncio.IncompleteReadError(partial, size)
            await self._wait()
        if self._exception is not None:
            raise self._exception
        return self._take(size)

    async def read(self, size: int) -> bytes | memoryview:
        """At most ``size`` bytes once some are here; empty at the end of the stream."""
        if self._exception is not None:
            raise self._exception
        while not self.buffered:
            if self._eof:
                return b""
            await self._wait()
        return self._take(min(size, self.buffered))

    def _take(self, size: int) -> bytes | memoryview:
        """``size`` buffered bytes: the chunk itself, a view of it, or a copy. A view keeps
        its whole chunk alive, so a request that is a small part of a large chunk is copied:
        what a request holds stays within a few times its size."""
        chunks, offset = self._chunks, self._offset
        first = chunks[0]
        end = offset + size
        if end <= len(first):
            if end == len(first):
                chunks.popleft()
                self._offset = 0
                if not offset:
                    taken: bytes | memoryview = first
                elif size * 4 >= len(first):
                    taken = memoryview(first)[offset:]
                else:
                    taken = first[offset:]
            else:
                self._offset = end
                taken = (
                    memoryview(first)[offset:end] if size * 4 >= len(first) else first[offset:end]
                )
        else:  # across chunks: joined
            parts: list[bytes | memoryview] = []
            need = size
            while need:
                chunk = chunks[0]
                piece = memoryview(chunk)[offset : offset + need]
                parts.append(piece)
                need -= len(piece)
                if offset + len(piece) == len(chunk):
                    chunks.popleft()
                    offset = 0
                else:
                    offset += len(piece)
            self._offset = offset
            taken = b"".join(parts)
        self.buffered -= size
        if self._reading_paused and self.buffered <= LOW_WATER:
            self._reading_paused = False
            self.transport.resume_reading()
        return taken

    # Writing.

    def write(self, data: bytes) -> None:
        """Queue ``data`` to send: it goes with whatever else this turn writes, at the end
        of the turn (or at once past FLUSH_AT bytes)."""
        if len(data) >= FLUSH_AT:
            self.flush()
            self.transport.write(data)
            return
        self._pending.append(data)
        self._pending_size += len(data)
        if self._pending_size >= FLUSH_AT:
            self.flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Hand what was written to the transport: one send for the turn's answers."""
        self._flush_scheduled = False
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        self._pending = []
        self._pending_size = 0
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait while the transport holds more than its high-water mark of unsent bytes
        (a client not reading its answers); raises if the connection failed or was lost."""
        if self._exception is not None:
            raise self._exception
        if self._lost:
            raise ConnectionResetError("Connection lost")
        if not self._writing_paused:
            return
        self.flush()
        if self._drain_waiter is None:  # one future for every writer waiting
            self._drain_waiter = self._loop.create_future()
        await asyncio.shield(self._drain_waiter)

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        """Close once the answers written are sent."""
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        """Close at once: the answers written so far are handed to the kernel first (as
        a write at once would have), what it does not take is dropped."""
        self.flush()
        self.transport.abort()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)

    async def start_tls(self, context: Any, ssl_handshake_timeout: float) -> None:
        """Speak TLS (server side) from here on."""
        self.flush()
        self.transport = await self._loop.start_tls(  # type: ignore[assignment]
            self.transport,
            self,
            context,
            server_side=True,
            ssl_handshake_timeout=ssl_handshake_timeout,
        )


# -- the deadline of a connection's reads -----------------------------------------------


class RequestStalled(Exception):
    """A client sent part of a request, then nothing for the request timeout."""


class ConnectionIdle(Exception):
    """A client sent no request for connections.max.idle.ms."""


class ReadDeadline:
    """The one timer of a connection's reads: a read may wait at most ``limit`` seconds for
    its next byte (the idle limit between requests, the stall limit within one). A read
    in time moves the deadline by assigning two numbers; the timer is re-armed only when
    it fires early or a shorter limit begins, not per request (three asyncio.timeout
    contexts per request were 7% of a small Produce). Past the deadline the reader gets
    the exception, which its pending or next read raises."""

    def __init__(self, reader: ClientStream) -> None:
        self._reader = reader
        self._loop = asyncio.get_running_loop()
        self._limit: float | None = None  # None: no read in progress
        self._since = 0.0  # the loop time of the last byte (or the read's start)
        self._expiry: Callable[[], Exception] = ConnectionIdle
        self._timer: asyncio.TimerHandle | None = None
        self._end = math.inf  # the loop time by which the whole read must be done
        self.total_expired = False  # what ran out: the whole read's limit, not a byte's

    def start(
        self, limit: float, expiry: Callable[[], Exception], total: float | None = None
    ) -> None:
        """A read begins that may wait ``limit`` s for a byte and, if ``total`` is given,
        must be done within ``total`` s however bytes trickle in; ``expiry`` makes the
        error."""
        self._since = now = self._loop.time()
        self._limit = limit
        self._expiry = expiry
        self._end = math.inf if total is None else now + total
        due = min(now + limit, self._end)
        if self._timer is not None and self._timer.when() > due:
            self._timer.cancel()
            self._timer = None
        if self._timer is None:
            self._timer = self._loop.call_at(due, self._check)

    def progress(self) -> None:
        """Bytes came: the limit counts from now."""
        self._since = self._loop.time()

    def stop(self) -> None:
        """No read in progress (a request is being handled): no deadline."""
        self._limit = None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._limit is None:
            return
        stalled = self._since + self._limit
        due = min(stalled, self._end)
        if self._loop.time() >= due:
            # The whole read's limit ran out while bytes still came (a dribble), rather
            # than a stall that the whole read's limit merely cut short.
            self.total_expired = self._end < stalled and self._end - self._since < self._limit / 2
            self._limit = None
            self._reader.set_exception(self._expiry())
        else:  # bytes came since it was armed: wait for the rest of the limit
            self._timer = self._loop.call_at(due, self._check)


async def read_body(
    reader: ClientStream,
    size: int,
    deadline: ReadDeadline,
    stall: float,
    total: float | None = None,
    received: Callable[[int], None] | None = None,
) -> bytes | memoryview:
    """The ``size`` bytes of a request's body; RequestStalled when no byte comes for
    ``stall`` seconds, or the whole body not within ``total`` seconds (a client dribbling
    a byte now and then must not hold its request's memory for ever). A large body is read
    into one buffer, not joined from pieces: its memory is its size, not twice that.

    ``received`` (a large request's): told of the bytes as they arrive, and the buffer grows
    with them rather than being allocated at the announced size, so a client announcing
    100 MiB and sending nothing holds nothing."""
    got = 0

    def late() -> RequestStalled:
        if deadline.total_expired:
            return RequestStalled(f"request not received within {total:g} s: {got} of {size} bytes")
        return RequestStalled(
            f"request stalled: {got} of {size} bytes, then nothing for {stall:g} s"
        )

    deadline.start(stall, late, total)
    chunk = await reader.read(size)
    if len(chunk) == size:  # all there already: the common case
        return chunk
    if not chunk:
        raise asyncio.IncompleteReadError(b"", size)
    if received is not None:
        grown = bytearray()
        while chunk:
            received(len(chunk))
            grown += chunk  # realloc: a large buffer grows in place (mremap), not copied
            got += len(chunk)
            if got == size:
                return memoryview(grown).toreadonly()
            deadline.progress()
            chunk = await reader.read(size - got)
        raise asyncio.IncompleteReadError(b"", size)
    view = memoryview(bytearray(size))
    while chunk:
        view[got : got + len(chunk)] = chunk
        got += len(chunk)
        if got == size:
            return view.toreadonly()
        deadline.progress()
        chunk = await reader.read(size - got)
    raise asyncio.IncompleteReadError(b"", size)  # the client closed mid-request
