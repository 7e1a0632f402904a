"""The high-watermark loop (kafkaesque/hot/high_watermark.py) while Redis is away: it retries
after its failure delay, not in a busy loop (on a manual clock: no real waiting)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

from kafkaesque.clock import ManualClock
from kafkaesque.errors import HotTierUnavailable
from kafkaesque.hot.high_watermark import HighWatermarks
from kafkaesque.hot.log import Log


class AwayLog:
    """A log whose Redis is away: every sweep's listing fails (and is counted)."""

    def __init__(self) -> None:
        self.listings = 0

    async def topic_configs(self) -> list[Any]:
        self.listings += 1
        raise HotTierUnavailable("cannot reach Redis: 127.0.0.1:1 (connection refused)")


def test_a_redis_away_is_retried_after_the_failure_delay_not_in_a_loop() -> None:
    away = AwayLog()

    async def run() -> None:
        clock = ManualClock()
        watermarks = HighWatermarks(cast(Log, away), replicas=1, failure_delay=0.2, clock=clock)
        task = asyncio.create_task(watermarks.run())
        await clock.advance(0)
        assert away.listings == 1  # the first sweep, at once
        await clock.advance(0.19)
        assert away.listings == 1  # not before the failure delay
        await clock.advance(0.51)
        assert away.listings == 4  # at 0.2, 0.4 and 0.6 s: once per delay, no more
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(run())
