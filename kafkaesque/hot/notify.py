"""Wake waiters when something happens to a key, in this process or any other.

Used for appends (long-polling fetches wake when records arrive) and for consumer groups
(requests waiting at a join barrier wake when the group changes). Events from this process
wake waiters at once through ``notify``; events from other processes (other brokers, the
CLI) arrive on Redis pub/sub channels named ``prefix + key``. Through Sentinel, a failover
announced by a sentinel moves the subscription to the new primary at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from kafkaesque.hot.outage import REDIS
from kafkaesque.hot.pipelined import ConnectionClosed, reply_batches
from kafkaesque.tasks import cancel_and_wait

Watcher = Callable[[str, str | None], None]
T = TypeVar("T")


class Notifier:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._prefix = prefix
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        # Watchers stay registered until removed and hear each event's message.
        self._watchers: dict[str, set[Watcher]] = {}
        self._task: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None
        self._pubsub: PubSub | None = None  # the subscription now
        self._switched = False  # a failover closed it: subscribe again at once
        self._stopping = False
        self.closed = False  # shutting down: fetches answer with what they have

    def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name=f"notifier {self._prefix}*")
        if hasattr(self._redis, "switches"):  # kafkaesque.hot.tier_sentinel.SentinelHotTier
            self._follower = asyncio.create_task(self._follow(), name="notifier failovers")

    async def stop(self) -> None:
        self._stopping = True
        if self._follower is not None:
            await cancel_and_wait(self._follower)
        if self._task is not None:
            await cancel_and_wait(self._task)

    async def _follow(self) -> None:
        """At each failover a sentinel announces, drop the subscription: it is made again
        on the new primary (the old one, demoted, may still answer for a while)."""
        while not self._stopping:
            try:
                async for _address in self._redis.switches():  # type: ignore[attr-defined]
                    pubsub = self._pubsub
                    if pubsub is not None and pubsub.connection is not None:
                        self._switched = True
                        await pubsub.connection.disconnect()
            except asyncio.CancelledError:
                raise
            except Exception:  # the sentinel went away: the subscription's errors remain
                pass
            await asyncio.sleep(1)

    async def _listen(self) -> None:
        prefix = self._prefix
        subscribed_before = False
        lost = False  # the subscription's connection just closed: subscribe again at once
        while not self._stopping:
            pubsub = self._pubsub = self._redis.pubsub()
            try:
                await pubsub.psubscribe(prefix + "*")
                lost = False
                REDIS.recovered()
                if subscribed_before:
                    # Events may have gone by unheard: every watcher must look again.
                    for key in list(self._watchers):
                        self.notify(key)
                subscribed_before = True
                await self._messages(pubsub)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis went away: retry; waiters fall back to timeouts
                if self._stopping:  # a cancel redis-py turned into a ConnectionError
                    return
                if self._switched:  # the failover we follow: the new primary is known
                    self._switched = False
                    continue
                if isinstance(exc, ConnectionClosed) and not lost:
                    # Only the connection may be gone (a timeout, a restart): reconnecting
                    # tells, and names the reason (refused, unknown host...) if Redis is.
                    lost = True
                    continue
                REDIS.failed(exc)  # logged once per outage
                await asyncio.sleep(1)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    async def _messages(self, pubsub: PubSub) -> None:
        """Notify each message of the subscription until its connection fails. Read
        straight off the connection: redis-py's listen() costs more per message than the
        append that sent it (listen() only where there is no socket: fakeredis)."""
        skip = len(self._prefix)
        reader = getattr(pubsub.connection, "_reader", None)
        if not isinstance(reader, asyncio.StreamReader):
            async for message in pubsub.listen():
                if message["type"] == "pmessage":
                    self.notify(message["channel"].decode()[skip:], message["data"].decode())
            return
        async for batch in reply_batches(reader):
            for kind, _pattern, channel, *data in batch:
                if kind == b"pmessage":
                    self.notify(channel.decode()[skip:], data[0].decode())

    def notify(self, key: str, message: str | None = None) -> None:
        """An event on ``key``; ``message`` says more (e.g. which partition grew), None:
        nothing more is known."""
        for future in self._waiters.pop(key, ()):
            if not future.done():
                future.set_result(None)
        for watcher in list(self._watchers.get(key, ())):
            watcher(key, message)

    def close(self) -> None:
        """Wake every waiter for good: the broker is shutting down."""
        self.closed = True
        for key in {*self._waiters, *self._watchers}:
            self.notify(key)

    def watch(self, keys: set[str], watcher: Watcher) -> None:
        """Call ``watcher(key, message)`` at every event on ``keys`` until ``unwatch``;
        at once (message None) if shutting down."""
        for key in keys:
            self._watchers.setdefault(key, set()).add(watcher)
        if self.closed:
            for key in keys:
                watcher(key, None)

    def unwatch(self, keys: set[str], watcher: Watcher) -> None:
        _unregister(self._watchers, keys, watcher)

    def waiter(self, keys: set[str]) -> asyncio.Future[None]:
        """A future resolved at the next event on any of ``keys``; register it before
        reading so an event between the read and the wait is not missed."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.closed:
            future.set_result(None)
        for key in keys:
            self._waiters.setdefault(key, set()).add(future)
        return future

    def discard(self, future: asyncio.Future[None], keys: set[str]) -> None:
        _unregister(self._waiters, keys, future)

    async def wait(
        self, key: str, timeout: float, future: asyncio.Future[None] | None = None
    ) -> None:
        """Wait for an event on ``key`` (or on an already registered ``future``), at most
        ``timeout`` seconds."""
        keys = {key}
        future = future or self.waiter(keys)
        try:
            await asyncio.wait({future}, timeout=timeout)
        finally:
            self.discard(future, keys)


def _unregister(registry: dict[str, set[T]], keys: set[str], item: T) -> None:
    """Take ``item`` off the sets of ``keys`` in ``registry``, dropping sets left empty."""
    for key in keys:
        items = registry.get(key)
        if items is not None:
            items.discard(item)
            if not items:
                del registry[key]
