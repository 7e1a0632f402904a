"""The high-watermark loop (kafkaesque/hot/high_watermark.py) while Redis is away: it retries
after its failure delay, not in a busy loop."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

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
        watermarks = HighWatermarks(cast(Log, away), replicas=1, failure_delay=0.2)
        task = asyncio.create_task(watermarks.run())
        await asyncio.sleep(0.7)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert 2 <= away.listings <= 5, away.listings
