"""Background tasks that talk to Redis: their pauses between passes, and stopping them."""

from __future__ import annotations

import asyncio
import contextlib


async def cancel_and_wait(task: asyncio.Task, retry: float = 0.1) -> None:
    """Cancel ``task`` and wait until it has ended.

    redis-py can swallow a cancel that lands while it connects (it turns it into a
    ConnectionError, or retries), so a single ``cancel()`` may leave a loop running for
    ever: cancel again until the task is done."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=retry)
    with contextlib.suppress(asyncio.CancelledError):
        task.result()


async def sleep_unless_stopped(seconds: float, stop: asyncio.Event | None) -> None:
    """Sleep ``seconds``, or until ``stop`` is set if sooner (None: no stop)."""
    if stop is None:
        await asyncio.sleep(seconds)
    else:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
