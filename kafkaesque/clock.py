"""Time, injected: the wall clock in milliseconds (as Kafka's timestamps and Redis' scores
count it), a monotonic clock for intervals, sleeps and timers.

Whatever keeps intervals, timeouts or expiries (group sessions, transaction timeouts,
offset retention, compaction's lags, fetch sessions, quotas, the coordinators' loops) takes
a ``Clock``: ``SYSTEM`` in the broker, a ``ManualClock`` in tests, which move time by hand
and see the timers and sleeps that are due run at once, without waiting for them.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int:
        """The wall clock, in milliseconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (intervals, deadlines)."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, seconds: float, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run ``callback(*args)`` in ``seconds``, on the running event loop."""
        ...


class SystemClock:
    """The real clocks and the event loop's timers."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[..., Any], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_later(seconds, callback, *args)


SYSTEM = SystemClock()


def now_ms() -> int:
    """The wall clock in milliseconds (``SYSTEM.now_ms``)."""
    return int(time.time() * 1000)


class _Pending:
    """A timer or a sleep of a ``ManualClock``: due at ``at`` (its monotonic seconds)."""

    def __init__(self, at: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.at = at
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when told (``advance``); what falls due then runs, in order.

    ``now_ms`` and ``monotonic`` move together. Timers (``call_later``) and sleeps are
    kept in order of their time; ``advance`` moves the clock to each in turn, runs it and
    lets the event loop run what it woke before going on, so a loop that sleeps its
    interval goes round once per interval passed."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._start_ms = now_ms
        self._seconds = 0.0
        self._pending: list[tuple[float, int, _Pending]] = []
        self._order = itertools.count()

    def now_ms(self) -> int:
        return self._start_ms + round(self._seconds * 1000)

    def monotonic(self) -> float:
        return self._seconds

    def call_later(self, seconds: float, callback: Callable[..., Any], *args: Any) -> Timer:
        pending = _Pending(self._seconds + max(0.0, seconds), callback, args)
        heapq.heappush(self._pending, (pending.at, next(self._order), pending))
        return pending

    async def sleep(self, seconds: float) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, _wake, woken)
        try:
            await woken
        finally:
            timer.cancel()

    async def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` on, running every timer and sleep due on the way."""
        await settle()  # tasks started before the call set their timers first
        until = self._seconds + seconds
        while self._pending and self._pending[0][0] <= until:
            at, _, pending = heapq.heappop(self._pending)
            if pending.cancelled:
                continue
            self._seconds = max(self._seconds, at)
            pending.callback(*pending.args)
            await settle()
        self._seconds = until
        await settle()

    async def advance_ms(self, ms: int) -> None:
        await self.advance(ms / 1000)


async def wait_event(clock: Clock, event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` passed on ``clock``; whether it was set."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, sleeper):
            task.cancel()
        await asyncio.gather(waiter, sleeper, return_exceptions=True)
    return event.is_set()


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


async def settle(rounds: int = 20) -> None:
    """Let the event loop run what is ready, a few rounds deep (tasks a wake-up started,
    and theirs), without letting real time pass."""
    for _ in range(rounds):
        await asyncio.sleep(0)
