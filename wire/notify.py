"""Wake long-polling fetches when records are appended, in this process or any other.

Appends made through this broker wake waiters at once; appends by other processes (other
brokers, the CLI) arrive through the Redis pub/sub channel the append script publishes to.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from kafkaesque.log import Log

log = logging.getLogger(__name__)


class AppendNotifier:
    def __init__(self, kafkaesque_log: Log) -> None:
        self._log = kafkaesque_log
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._task: asyncio.Task[None] | None = None
        self.closed = False  # shutting down: fetches answer with what they have

    def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="append-notifier")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _listen(self) -> None:
        prefix = self._log.channel("")
        while True:
            pubsub = self._log.redis.pubsub()
            try:
                await pubsub.psubscribe(prefix + "*")
                async for message in pubsub.listen():
                    if message["type"] == "pmessage":
                        self.notify(message["channel"].decode()[len(prefix) :])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis went away: retry, fetches fall back to timeouts
                log.warning("append notifications interrupted: %s", exc)
                await asyncio.sleep(1)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    def notify(self, topic: str) -> None:
        for future in self._waiters.pop(topic, ()):
            if not future.done():
                future.set_result(None)

    def close(self) -> None:
        """Wake every waiting fetch for good: the broker is shutting down."""
        self.closed = True
        for topic in list(self._waiters):
            self.notify(topic)

    def waiter(self, topics: set[str]) -> asyncio.Future[None]:
        """A future resolved at the next append to any of ``topics``; register it before
        reading so an append between the read and the wait is not missed."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for topic in topics:
            self._waiters.setdefault(topic, set()).add(future)
        return future

    def discard(self, future: asyncio.Future[None], topics: set[str]) -> None:
        for topic in topics:
            waiters = self._waiters.get(topic)
            if waiters is not None:
                waiters.discard(future)
                if not waiters:
                    del self._waiters[topic]
