"""The memory budget of requests being read or handled, across connections."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

# Requests above this size are large: their bodies are received one at a time, beside the
# budget (RequestBudget.admit_large). Producers' batches are at most 1 MiB by default
# (max.request.size, librdkafka's message.max.bytes), so large requests are rare.
LARGE_REQUEST = 1 << 20


class RequestBudget:
    """Bytes of requests being read or handled, across connections: Kafka's
    queued.max.request.bytes. A connection reserves a request's size before reading its body
    and waits, not reading its socket, while the budget is spent; waiters are served in
    arrival order, so small requests do not starve a large one.

    A large request (over ``large_above``) does not reserve its announced size up front: a
    client announcing 100 MiB and sending nothing would hold the budget of every other
    client. Its body is received first, one large request at a time, beside the budget
    (``admit_large``; ``beside`` counts its bytes as they come), and only then moves into
    the budget (``settle``), freeing the way for the next large one. A stalled or dribbling
    large request thus delays only other large ones, until the request timeout closes it;
    small requests are served meanwhile. A request larger than the whole budget could never
    fit: it stays beside it until handled. Request memory stays under the budget plus one
    request."""

    def __init__(self, capacity: int, large_above: int | None = None) -> None:
        self.capacity = capacity
        # A budget smaller than a few large requests (tests, tiny brokers): a quarter of it.
        self.large_above = min(LARGE_REQUEST, capacity // 4) if large_above is None else large_above
        self.reserved = 0  # within the budget
        self.beside = 0  # the one large request being received (or handled, if oversized)
        self.waiting = 0
        self._queue: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._oversized = asyncio.Lock()

    async def reserve(self, size: int) -> None:
        self.waiting += 1
        try:
            if size > self.capacity:
                await self._oversized.acquire()
                self.beside = size
            elif not self._queue and self.reserved + size <= self.capacity:
                self.reserved += size
            else:
                await self._wait(size)
        finally:
            self.waiting -= 1

    def try_reserve(self, size: int) -> bool:
        """Reserve ``size`` bytes if they fit now with no one waiting (``reserve``
        without the wait); False if not, nothing reserved."""
        if self._queue or self.reserved + size > self.capacity:
            return False
        self.reserved += size
        return True

    async def admit_large(self) -> None:
        """Wait until no other large request is being received (its body read)."""
        self.waiting += 1
        try:
            await self._oversized.acquire()
        finally:
            self.waiting -= 1
        self.beside = 0

    def received(self, count: int) -> None:
        """``count`` more bytes of the large request being received arrived."""
        self.beside += count

    def abandon_large(self) -> None:
        """The large request being received failed (stalled, the client left)."""
        self.beside = 0
        self._oversized.release()

    async def settle(self, size: int) -> None:
        """The large request being received has all its ``size`` bytes: it takes its place
        in the budget (waiting in line like any other) and the next large one may come. One
        larger than the whole budget stays beside it; ``release(size)`` ends it."""
        if size > self.capacity:
            self.beside = size
            return
        self.beside = size
        try:
            await self.reserve(size)
        finally:
            self.beside = 0
            self._oversized.release()

    async def _wait(self, size: int) -> None:
        entry = (size, asyncio.get_running_loop().create_future())
        self._queue.append(entry)
        try:
            await entry[1]
        except asyncio.CancelledError:
            if entry[1].cancelled():
                with contextlib.suppress(ValueError):  # _grant may have dropped it
                    self._queue.remove(entry)
                self._grant()  # the ones behind it may fit now
            else:  # granted just as the task was cancelled
                self.release(size)
            raise

    def release(self, size: int) -> None:
        if size > self.capacity:
            self.beside = 0
            self._oversized.release()
        else:
            self.reserved -= size
            self._grant()

    def _grant(self) -> None:
        while self._queue and self.reserved + self._queue[0][0] <= self.capacity:
            size, future = self._queue.popleft()
            if not future.cancelled():
                self.reserved += size
                future.set_result(None)
