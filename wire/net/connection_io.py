"""A connection's plumbing below the server: the deadline of its reads, reading a
request's body, raising the open-files limit and keeping freed request buffers for reuse
(its logging: kafkaesque/log_throttle.py)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import math
import resource
from collections.abc import Callable

from wire.net.stream import ClientStream


class RequestStalled(Exception):
    """A client sent part of a request, then nothing for the request timeout."""


class ConnectionIdle(Exception):
    """A client sent no request for connections.max.idle.ms."""


def raise_open_files_limit() -> None:
    """Raise the soft limit of open files to the hard one: every connection is a file, and
    the usual soft limit (1024) is below what a broker holds."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):  # an unlimited hard limit (macOS)
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# glibc's mallopt parameters.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Buffers up to this size (a produce request of the default 1 MiB, a received chunk of
# 256 KiB, the Redis command that appends its batches) come from the heap, not from an
# mmap of their own; and up to TRIM_ABOVE bytes freed at the heap's top stay with it.
MMAP_ABOVE = 4 << 20
TRIM_ABOVE = 32 << 20


def keep_freed_memory() -> bool:
    """Have glibc's malloc reuse freed request buffers rather than give their pages back
    to the kernel and fault in fresh zeroed ones for the next request: with its defaults,
    every large request and its Redis command was an mmap and munmap (or a trim of the
    heap), and page faults were 13% of the broker's CPU producing (docs/profile.md).
    False where the C library is not glibc (nothing changed)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # musl, macOS: no mallopt
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_ABOVE)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_ABOVE)
    )


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
