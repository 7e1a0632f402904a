"""The broker's shared state and the dispatch table of API handlers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kafkaesque.cluster import cluster_id
from kafkaesque.groups import CoordinatorConfig, GroupCoordinator
from kafkaesque.log import Log
from kafkaesque.notify import Notifier
from kafkaesque.outage import REDIS, REDIS_CONNECTION_ERRORS
from kafkaesque.tasks import cancel_and_wait
from wire.protocol import Request

Handler = Callable[["Broker", Request], Awaitable[Any]]

# api key -> (min version, max version, handler). The ranges are chosen so the clients we
# test (librdkafka, kafka-python, aiokafka, kafkajs) each land on a version we implement;
# see README.txt. Handlers register themselves with @api(...).
HANDLERS: dict[int, tuple[int, int, Handler]] = {}


def api(api_key: int, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[api_key] = (min_version, max_version, fn)
        return fn

    return register


@dataclass(slots=True)
class BrokerConfig:
    host: str = "127.0.0.1"  # advertised host: an IPv4 literal, see README
    port: int = 9092
    node_id: int = 0
    auto_create_topics: bool = True
    default_partitions: int = 1
    max_message_bytes: int = 1024 * 1024 + 12  # Kafka's message.max.bytes default
    connections_max_idle_ms: int = 600_000  # Kafka's default: idle connections close
    groups: CoordinatorConfig = field(default_factory=CoordinatorConfig)


class Broker:
    def __init__(self, log: Log, config: BrokerConfig) -> None:
        self.log = log
        self.config = config
        self.notifier = Notifier(log.redis, log.channel(""))
        self.groups = GroupCoordinator(log.redis, config.groups, log.ns)
        self.cluster_id = ""
        self._reaper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.cluster_id = await cluster_id(self.log.redis, self.log.ns)
        self.notifier.start()
        self.groups.start()
        self._reaper = asyncio.create_task(self._expire_members(), name="group reaper")

    def closing(self) -> None:
        """Shutting down: waiting fetches and group requests answer now."""
        self.notifier.close()
        self.groups.notifier.close()

    async def stop(self) -> None:
        if self._reaper is not None:
            await cancel_and_wait(self._reaper)
        await self.notifier.stop()
        await self.groups.stop()

    async def _expire_members(self) -> None:
        """Expire group members whose sessions timed out, and close join rounds past their
        deadline; every broker on the Redis does it, the group lock keeps it single."""
        ticks = 0
        while True:
            await asyncio.sleep(0.5)
            try:
                # Every group at the start and once a minute, else those with members.
                await self.groups.tick_all(sweep=ticks % 120 == 0)
                ticks += 1
            except REDIS_CONNECTION_ERRORS as exc:
                REDIS.failed(exc)  # logged once per outage; the next tick retries
            except Exception:
                logging.getLogger(__name__).exception("expiring group members failed")
            else:
                REDIS.recovered()

    @staticmethod
    def supported() -> dict[int, tuple[int, int]]:
        return {key: (lo, hi) for key, (lo, hi, _) in HANDLERS.items()}
