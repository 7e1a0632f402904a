"""Each partition's high watermark, kept where Redis replicas are required.

Kafka's leader lets consumers read only below the high watermark, the offset every
in-sync replica has reached. Redis replicates asynchronously: without one, a consumer
could read a record only the primary has, which a failover then erases, giving its offset
to another record (docs/jepsen.md). With ``--min-insync-replicas N`` above 1 the broker
keeps one per partition, the field ``hw`` of its meta hash, and reads stop there
(``Log.capped``, partition_read.lua).

Raising one takes three steps on one connection to the partition's primary: hw_mark.lua
notes each log end with a write, WAIT for N - 1 replicas (it counts the replication
stream up to the connection's last write, so every record below the noted ends), then
hw_raise.lua sets ``hw`` to them and announces it as an append is (long polls wake).
Rounds run one at a time for the partitions appended to since the last (a group commit:
one WAIT for them all), and for every partition every few seconds (appends of brokers
that died before raising, a failover's new primary). A WAIT that does not see enough
replicas raises nothing: its partitions wait for the next round. An acks=all append
raises its partition's high watermark itself before it is answered, as Kafka answers
acks=all once the high watermark passed the records: no acknowledged record is unseen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from redis.crc import key_slot
from redis.exceptions import RedisError

from kafkaesque.clock import SYSTEM, Clock, wait_event
from kafkaesque.errors import KafkaesqueError
from kafkaesque.hot.keys import serving
from kafkaesque.hot.log import Log
from kafkaesque.hot.outage import REDIS, REDIS_CONNECTION_ERRORS
from kafkaesque.log_throttle import LogThrottle
from kafkaesque.types import TopicPartition

log = logging.getLogger(__name__)

# Partitions per script call: a sweep of 10,000 partitions is ten short scripts, not one
# that holds Redis for long.
CHUNK = 1000


@dataclass(eq=False)
class HighWatermarks:
    """Raises the high watermarks of ``log``'s partitions to what ``replicas`` Redis
    replicas have; ``attach`` makes the log's reads stop at them."""

    log: Log
    replicas: int
    timeout_ms: int = 1_000
    sweep_interval: float = 5.0
    retry_delay: float = 0.1  # after a round that found too few replicas
    failure_delay: float = 1.0  # after a failed one (Redis away): no busy loop
    clock: Clock = SYSTEM  # the sweeps' interval and the delays are on it
    _dirty: set[TopicPartition] = field(default_factory=set, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    # Failed rounds' warnings, on this module's logger (the global ``log``, not the field).
    _throttle: LogThrottle = field(default_factory=lambda: LogThrottle(log), init=False)

    def attach(self) -> None:
        """From now on the log's reads stop at the high watermarks, and its appends are
        noted here."""
        self.log.capped = True
        self.log.on_append = self.note

    def note(self, topic: str, partition: int) -> None:
        """An append to the partition: raise its high watermark in the next round."""
        self._dirty.add((topic, partition))
        self._wake.set()

    async def run(self) -> None:
        """Raise high watermarks until cancelled; Redis being away is retried."""
        swept = -float("inf")
        while True:
            if self.clock.monotonic() - swept >= self.sweep_interval:
                try:
                    self._dirty |= set(await self._every_partition())
                    swept = self.clock.monotonic()
                except (RedisError, KafkaesqueError) as exc:
                    self._failed(exc)
                    # The next sweep in failure_delay, not at once.
                    swept = self.clock.monotonic() - self.sweep_interval + self.failure_delay
            if not self._dirty:
                self._wake.clear()
                wait = max(0.0, swept + self.sweep_interval - self.clock.monotonic())
                await wait_event(self.clock, self._wake, wait)
                continue
            round_, self._dirty = self._dirty, set()
            delay = self.retry_delay
            try:
                behind = await self.raise_once(round_)
            except (RedisError, KafkaesqueError) as exc:
                self._failed(exc)
                behind, delay = round_, self.failure_delay
            if behind:
                self._dirty |= behind
                await self.clock.sleep(delay)

    async def raise_once(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """One round over ``partitions``; returns those whose replicas were too few."""
        groups: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            meta = self.log.keys.partition(*tp).meta
            slot = key_slot(meta.encode()) if self.log.cluster else 0  # a script's keys share one
            groups.setdefault(slot, []).append(tp)
        chunks = [g[i : i + CHUNK] for g in groups.values() for i in range(0, len(g), CHUNK)]
        behind: set[TopicPartition] = set()
        for result in await asyncio.gather(*(self._raise(c) for c in chunks)):
            behind |= result
        return behind

    async def _raise(self, partitions: list[TopicPartition]) -> set[TopicPartition]:
        keys = self.log.keys
        metas = [keys.partition(*tp).meta for tp in partitions]
        server = await serving(self.log.redis, metas[0])
        async with server.client() as connection:
            ends = await self.log.scripts.hw_mark(keys=metas, args=[], client=connection)
            acknowledged = await connection.execute_command("WAIT", self.replicas, self.timeout_ms)
            if int(acknowledged) < self.replicas:
                return set(partitions)
            args: list[Any] = []
            for (topic, _), end in zip(partitions, ends, strict=True):
                args += [end, keys.appended(topic)]
            await self.log.scripts.hw_raise(keys=metas, args=args, client=connection)
        return set()

    async def _every_partition(self) -> list[TopicPartition]:
        return [
            (config.name, p)
            for config in await self.log.topic_configs()
            for p in range(config.partitions)
        ]

    def _failed(self, exc: Exception) -> None:
        if isinstance(exc, REDIS_CONNECTION_ERRORS):
            REDIS.failed(exc)  # once per outage
        else:  # e.g. a demoted primary refusing writes until the client moves on
            what = "raising high watermarks failed"
            self._throttle.log(what, logging.WARNING, what, "%s: %s", what, exc)
