"""A connection's plumbing below the server: reading a request's body with a stall
timeout, raising the open-files limit, and logging a repeated failure once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
from collections.abc import Hashable

REPEAT_LOG_INTERVAL = 60.0  # seconds between lines counting a repeated warning or error


class RequestStalled(Exception):
    """A client sent part of a request, then nothing for the request timeout."""


class LogThrottle:
    """Logs the first occurrence of a kind of event in full, then one line per interval
    counting its repeats: a failure on every request must not write a traceback each."""

    def __init__(self, logger: logging.Logger, interval: float = REPEAT_LOG_INTERVAL) -> None:
        self.logger = logger
        self.interval = interval
        self._repeats: dict[Hashable, int] = {}  # key -> repeats in the current interval

    def log(
        self,
        key: Hashable,
        level: int,
        summary: str,
        msg: str,
        *args: object,
        exc_info: BaseException | None = None,
    ) -> None:
        """Log ``msg`` unless ``key`` was logged within the interval; repeats are reported
        as "``summary``: N more in the last S s" at the interval's end."""
        if key in self._repeats:
            self._repeats[key] += 1
            return
        self._repeats[key] = 0
        self.logger.log(level, msg, *args, exc_info=exc_info)
        self._schedule(key, level, summary)

    def _schedule(self, key: Hashable, level: int, summary: str) -> None:
        asyncio.get_running_loop().call_later(self.interval, self._report, key, level, summary)

    def _report(self, key: Hashable, level: int, summary: str) -> None:
        count = self._repeats.pop(key)
        if count:  # still happening: count on; else the next one is logged in full
            self.logger.log(level, "%s: %d more in the last %g s", summary, count, self.interval)
            self._repeats[key] = 0
            self._schedule(key, level, summary)


def raise_open_files_limit() -> None:
    """Raise the soft limit of open files to the hard one: every connection is a file, and
    the usual soft limit (1024) is below what a broker holds."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):  # an unlimited hard limit (macOS)
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def read_body(reader: asyncio.StreamReader, size: int, timeout: float) -> bytes | memoryview:
    """The ``size`` bytes of a request's body; RequestStalled when no byte comes for
    ``timeout`` seconds. A large body is read into one buffer, not joined from pieces: its
    memory is its size, not twice that."""
    loop = asyncio.get_running_loop()
    got = 0
    try:
        async with asyncio.timeout(timeout) as deadline:
            chunk = await reader.read(size)
            if len(chunk) == size:  # all there already: the common case
                return chunk
            if not chunk:
                raise asyncio.IncompleteReadError(b"", size)
            view = memoryview(bytearray(size))
            while chunk:
                view[got : got + len(chunk)] = chunk
                got += len(chunk)
                if got == size:
                    return view.toreadonly()
                deadline.reschedule(loop.time() + timeout)
                chunk = await reader.read(size - got)
    except TimeoutError:
        raise RequestStalled(
            f"request stalled: {got} of {size} bytes, then nothing for {timeout:g} s"
        ) from None
    raise asyncio.IncompleteReadError(b"", size)  # the client closed mid-request
