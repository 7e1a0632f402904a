"""The injected clock (kafkaesque/clock.py): a ManualClock runs timers and sleeps when it is
moved past them, in order, and never before; the system clock is the real one."""

from __future__ import annotations

import asyncio
import time

from kafkaesque.clock import SYSTEM, ManualClock, wait_event
from kafkaesque.groups.types import ExpiryTimers


def test_timers_and_sleeps_run_in_order_when_the_clock_passes_them() -> None:
    async def scenario() -> list[tuple[str, float]]:
        clock = ManualClock(now_ms=5_000)
        ran: list[tuple[str, float]] = []
        clock.call_later(2.0, lambda: ran.append(("two", clock.monotonic())))
        clock.call_later(1.0, lambda: ran.append(("one", clock.monotonic())))
        cancelled = clock.call_later(1.5, lambda: ran.append(("cancelled", clock.monotonic())))
        cancelled.cancel()

        async def sleeper() -> None:
            await clock.sleep(1.2)
            ran.append(("slept", clock.monotonic()))

        task = asyncio.create_task(sleeper())
        await clock.advance(0.999)
        assert ran == [] and clock.now_ms() == 5_999
        await clock.advance(3)
        await task
        assert clock.monotonic() == 3.999 and clock.now_ms() == 8_999
        return ran

    assert asyncio.run(scenario()) == [("one", 1.0), ("slept", 1.2), ("two", 2.0)]


def test_a_loop_sleeping_its_interval_goes_round_once_per_interval() -> None:
    async def scenario() -> list[int]:
        clock = ManualClock()
        rounds: list[int] = []

        async def loop() -> None:
            while True:
                rounds.append(clock.now_ms() - 1_700_000_000_000)
                await clock.sleep(0.5)

        task = asyncio.create_task(loop())
        await clock.advance(2.2)
        task.cancel()
        return rounds

    assert asyncio.run(scenario()) == [0, 500, 1000, 1500, 2000]


def test_wait_event_ends_at_the_event_or_the_time() -> None:
    async def scenario() -> tuple[bool, bool]:
        clock = ManualClock()
        event = asyncio.Event()
        timed_out = asyncio.create_task(wait_event(clock, event, 1.0))
        await clock.advance(1.0)
        set_in_time = asyncio.create_task(wait_event(clock, event, 1.0))
        await clock.advance(0.5)
        event.set()
        return await timed_out, await set_in_time

    assert asyncio.run(scenario()) == (False, True)


def test_expiry_timers_fire_at_the_deadline_on_the_injected_clock() -> None:
    """A group's session timer (kafkaesque/groups/types.py) fires when the coordinator's clock
    reaches the deadline, to the millisecond, however long that is in real time."""

    async def scenario() -> list[tuple[str, int]]:
        clock = ManualClock(now_ms=1_000_000)
        timers = ExpiryTimers("test", clock)
        ticked: list[tuple[str, int]] = []

        async def tick(group_id: str) -> None:
            ticked.append((group_id, clock.now_ms()))

        timers.arm("g", 1_045_000, tick)  # a 45 s session
        timers.arm("g", 1_050_000, tick)  # a later deadline does not push it back
        timers.arm("h", 1_010_000, tick)
        await clock.advance(9.999)
        assert ticked == []
        await clock.advance(40)
        timers.close()
        return ticked

    assert asyncio.run(scenario()) == [("h", 1_010_000), ("g", 1_045_000)]


def test_the_system_clock_is_the_real_one() -> None:
    assert abs(SYSTEM.now_ms() - time.time() * 1000) < 1000
    assert abs(SYSTEM.monotonic() - time.monotonic()) < 1
