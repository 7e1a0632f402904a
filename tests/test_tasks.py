"""Stopping background tasks whose client library may swallow a cancel."""

from __future__ import annotations

import asyncio

from kafkaesque.tasks import cancel_and_wait


async def _swallows_cancels(swallow: int, cancels: list[int]) -> None:
    """A retry loop as redis-py makes one: a cancel while connecting becomes a
    ConnectionError, which the loop catches and retries."""
    while True:
        try:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancels.append(1)
                if len(cancels) > swallow:
                    raise
                raise ConnectionError("cancelled while connecting") from None
        except ConnectionError:
            continue


def test_a_swallowed_cancel_is_repeated_until_the_task_ends() -> None:
    async def scenario() -> None:
        cancels: list[int] = []
        task = asyncio.create_task(_swallows_cancels(2, cancels))
        await asyncio.sleep(0)
        await asyncio.wait_for(cancel_and_wait(task, retry=0.01), 5)
        assert task.cancelled() and len(cancels) == 3

    asyncio.run(scenario())


def test_a_finished_task_is_left_alone() -> None:
    async def scenario() -> None:
        task = asyncio.create_task(asyncio.sleep(0, result=7))
        await task
        await cancel_and_wait(task)
        assert task.result() == 7

    asyncio.run(scenario())
