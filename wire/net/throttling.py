"""What holds a client's requests back, each by reading no more of its connection for a
while (as Kafka's Processor mutes a channel):

- ``RequestBudget``: the bytes of requests being read or handled, across connections
  (Kafka's queued.max.request.bytes); a request's body is read once its size fits;
- ``Throttling``: the client quotas (Kafka's KIP-13/KIP-219) around the handlers: caps a
  Fetch to its consumer quota before the handler, and after it records the bytes, sets
  the response's throttle_time and says how long to mute the connection;
- ``with_throttle``: a response saying it was throttled.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
from collections import deque
from typing import Any

from kafkaesque.security.quota_rates import QuotaManager
from kafkaesque.security.quotas import ANONYMOUS, CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE
from wire.protocol.codec import Request

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


# -- the client quotas ------------------------------------------------------------------

PRODUCE, FETCH, ALTER_CLIENT_QUOTAS, SHARE_FETCH = 0, 1, 49, 78


def with_throttle(response: Any, throttle_ms: int) -> Any:
    """``response`` saying it was throttled ``throttle_ms`` (or what it says already, if
    longer); unchanged if its version has no throttle_time (Produce v0)."""
    current = getattr(response, "throttle_time", None)
    wanted = datetime.timedelta(milliseconds=throttle_ms)
    if current is None or current >= wanted:
        return response
    return dataclasses.replace(response, throttle_time=wanted)


class Throttling:
    """The quotas applied around the handlers, for the server. Every client is the user
    ANONYMOUS (no authentication yet), as on Kafka's PLAINTEXT listener."""

    def __init__(self, manager: QuotaManager) -> None:
        self.manager = manager

    def before(self, request: Request) -> Request:
        """A Fetch asks for no more than its consumer quota allows in the measured window
        (Kafka's cap), so one response cannot be throttled for ever."""
        if request.api_key not in (FETCH, SHARE_FETCH) or not self.manager.active:
            return request
        cap = self.manager.max_in_window(CONSUMER_BYTE_RATE, ANONYMOUS, request.client_id or "")
        if cap is None or request.body.max_bytes <= cap:
            return request
        body = dataclasses.replace(request.body, max_bytes=max(int(cap), 1))
        return dataclasses.replace(request, body=body)

    def after(self, request: Request, response: Any, response_size: int) -> tuple[Any, int]:
        """The response to send (with its throttle time) and the ms to mute the connection
        after sending it; ``response_size`` is the encoded response's, for Fetch."""
        if request.api_key == ALTER_CLIENT_QUOTAS and not request.body.validate_only:
            self.manager.changed()  # this broker's own change applies at once
        if not self.manager.active:
            return response, 0
        client_id = request.client_id or ""
        if request.api_key == PRODUCE:
            # Kafka counts the whole request, and throttles acks=0 producers too.
            ms = self.manager.record(PRODUCER_BYTE_RATE, ANONYMOUS, client_id, request.size)
        elif request.api_key == FETCH:
            ms = self.manager.record(CONSUMER_BYTE_RATE, ANONYMOUS, client_id, response_size)
            if ms:
                # As Kafka: the data is not sent (nor counted); the client fetches it again
                # after the throttle time.
                self.manager.unrecord(CONSUMER_BYTE_RATE, ANONYMOUS, client_id, response_size)
                response = dataclasses.replace(response, responses=())
        elif request.api_key == SHARE_FETCH:
            # Kafka counts a ShareFetch as a fetch, and sends its records anyway: they are
            # acquired (locked) for this member.
            ms = self.manager.record(CONSUMER_BYTE_RATE, ANONYMOUS, client_id, response_size)
        else:
            return response, 0
        if ms and response is not None:
            response = with_throttle(response, ms)
        return response, ms
