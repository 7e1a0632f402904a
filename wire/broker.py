"""The broker's shared state: the log, its partition layer, the group coordinator."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from kafkaesque.cluster import cluster_id
from kafkaesque.compaction import Compactor
from kafkaesque.durability import probe
from kafkaesque.groups import CoordinatorConfig, GroupCoordinator
from kafkaesque.log import Log
from kafkaesque.memory import MemoryGuard
from kafkaesque.notify import Notifier
from kafkaesque.outage import REDIS, REDIS_CONNECTION_ERRORS
from kafkaesque.partitions import MAX_MESSAGE_BYTES, Partitions
from kafkaesque.tasks import cancel_and_wait
from wire.protocol import MAX_REQUEST_SIZE

log = logging.getLogger(__name__)


@dataclass(slots=True)
class BrokerConfig:
    host: str = "127.0.0.1"  # advertised host: an IPv4 literal, see README
    port: int = 9092
    node_id: int = 0
    auto_create_topics: bool = True
    default_partitions: int = 1
    max_message_bytes: int = MAX_MESSAGE_BYTES
    connections_max_idle_ms: int = 600_000  # Kafka's default: idle connections close
    # Kafka's socket.request.max.bytes: a larger request closes its connection.
    socket_request_max_bytes: int = MAX_REQUEST_SIZE
    # Kafka's queued.max.request.bytes (unbounded there): bytes of requests being read or
    # handled across connections; beyond it connections wait, which bounds the memory.
    queued_max_request_bytes: int = MAX_REQUEST_SIZE
    request_timeout_ms: int = 30_000  # a request sent in part, then stalled this long, closes
    max_connections: int | None = None  # Kafka's max.connections; None: no limit
    max_connections_per_ip: int | None = None  # Kafka's max.connections.per.ip
    # Kafka's min.insync.replicas: copies acks=all waits for, Redis itself counted (so
    # 1 waits for no replica: only the AOF fsync).
    min_insync_replicas: int = 1
    groups: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    # Seconds between compaction passes over compact topics (Kafka's log cleaner); 0: none.
    compaction_interval: float = 5.0


class Broker:
    def __init__(self, log: Log, config: BrokerConfig) -> None:
        self.log = log
        self.config = config
        self.notifier = Notifier(log.redis, log.channel(""))
        self.partitions = Partitions(log, self.notifier, config.max_message_bytes)
        self.groups = GroupCoordinator(log.redis, config.groups, log.ns)
        self.cluster_id = ""
        self.memory = MemoryGuard(log.redis, log.release_archived)
        self.partitions.memory = self.memory
        self._reaper: asyncio.Task[None] | None = None
        self._memory_watch: asyncio.Task[None] | None = None
        self._compaction: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.cluster_id = await cluster_id(self.log.redis, self.log.ns)
        durability, promise = await probe(self.log.redis, self.config.min_insync_replicas)
        self.partitions.durability = durability
        log.info("acks=all: %s", promise)
        await self.memory.start()
        self._memory_watch = asyncio.create_task(self.memory.watch(), name="memory watch")
        self.notifier.start()
        self.groups.start()
        self._reaper = asyncio.create_task(self._expire_members(), name="group reaper")
        if self.config.compaction_interval > 0:
            compactor = Compactor(self.log)
            self._compaction = asyncio.create_task(
                compactor.run_forever(self.config.compaction_interval), name="compaction"
            )

    def closing(self) -> None:
        """Shutting down: waiting fetches and group requests answer now."""
        self.notifier.close()
        self.groups.notifier.close()

    async def stop(self) -> None:
        for task in (self._reaper, self._memory_watch, self._compaction):
            if task is not None:
                await cancel_and_wait(task)
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
                log.exception("expiring group members failed")
            else:
                REDIS.recovered()
