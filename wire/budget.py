"""The memory budget of requests being read or handled, across connections."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class RequestBudget:
    """Bytes of requests being read or handled, across connections: Kafka's
    queued.max.request.bytes. A connection reserves a request's size before reading its body
    and waits, not reading its socket, while the budget is spent; waiters are served in
    arrival order, so small requests do not starve a large one. A request larger than the
    whole budget could never fit: it goes beside the budget, one at a time, so the memory
    of requests stays under the budget plus one request."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.reserved = 0  # within the budget
        self.beside = 0  # the one request larger than the budget being read or handled
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
