"""Operations over several partitions on a Redis Cluster, done in steps (docs/scale-out.md
2.3): a topic's partitions are in different slots, so no one script can create, change or
delete a topic, or switch archiving on, as it does on a single Redis.

Each operation runs a script on the catalog slot first (which leaves a marker in
``Keys.steps``), then one script per partition, each atomic for its partition and harmless
to repeat, then drops the marker. A crash in between leaves the marker: ``finish_steps``
(every broker's periodic sweep) completes what a marker older than ``STEP_AGE_MS`` says.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from redis.exceptions import WatchError

from kafkaesque.clock import now_ms as _now_ms
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import Conflict, UnknownTopic
from kafkaesque.hot.log_catalog import Catalog
from kafkaesque.hot.log_context import LogContext, LogPart
from kafkaesque.hot.log_types import RestoredTopic
from kafkaesque.hot.sequence import counter_of
from kafkaesque.hot.slots import slot_of

# A marker this old belongs to an operation that stopped half-way (the sweep's threshold).
STEP_AGE_MS = 10_000
# The archiving switch while archive_on.lua visits the partitions: creators already
# see it (they test that it exists); only the finished switch (ARCHIVING_ON) means done.
ARCHIVING_PENDING = b"pending"


class Steps(LogPart):
    """The cluster layout's multi-partition operations, for kafkaesque.hot.log.Log; the
    catalog steps run through ``catalog`` (recovery first), the sweep reads topics there."""

    def __init__(self, context: LogContext, catalog: Catalog) -> None:
        super().__init__(context)
        self.catalog = catalog

    # -- create and change -------------------------------------------------------------
    async def create_in_steps(self, config: TopicConfig) -> None:
        k = self.keys
        name = config.name
        topic_id = config.topic_id.hex()
        archiving, floor = await self.catalog.call(
            self.scripts.create_catalog,
            keys=[
                k.topics,
                k.topic(name),
                k.incarnation,
                k.archiving,
                k.sequence_floor,
                k.steps,
                k.creating(name),
                k.deleting(name),
            ],
            args=[name, config.pack(), _now_ms(), topic_id],
        )
        await self._create_partitions(config, range(config.partitions), archiving, floor, 0)
        await self._step_done(k.creating(name), topic_id)

    async def _create_partitions(
        self,
        config: TopicConfig,
        partitions: Iterable[int],
        archiving: int,
        floor: int,
        version: int,
    ) -> None:
        """create_partition.lua for each of ``partitions`` (one round trip per shard would
        do; one per partition is what a creation costs today)."""
        settings, topic_id = config.lua_settings(), config.topic_id.hex()
        for p in partitions:
            await self.scripts.create_partition(
                keys=[
                    self.keys.partition(config.name, p).meta,
                    self.keys.slot_hash(slot_of(config.name, p)),
                ],
                args=[settings, topic_id, archiving, floor, version],
            )

    async def configure_in_steps(
        self, raw: bytes, current: TopicConfig, changed: TopicConfig
    ) -> None:
        """The change from ``current`` (stored as ``raw``) to ``changed``; raises Conflict
        if the topic changed meanwhile."""
        k = self.keys
        name = changed.name
        version, archiving, floor = await self.scripts.configure_catalog(
            keys=[
                k.topic(name),
                k.archiving,
                k.sequence_floor,
                k.steps,
                k.configuring(name),
                k.config_versions,
            ],
            args=[raw, changed.pack(), _now_ms(), name],
        )
        await self._apply_config(changed, version, archiving, floor)
        await self._step_done(k.configuring(name), str(version))

    async def _apply_config(
        self, config: TopicConfig, version: int, archiving: int, floor: int
    ) -> None:
        """Give every partition the config's settings (version ``version``), creating those
        that do not exist yet."""
        settings, topic_id = config.lua_settings(), config.topic_id.hex()
        missing = []
        for p in range(config.partitions):
            applied = await self.scripts.configure_partition(
                keys=[self.keys.partition(config.name, p).meta], args=[settings, version, topic_id]
            )
            if applied == -1:
                missing.append(p)
        await self._create_partitions(config, missing, archiving, floor, version)

    # -- delete -----------------------------------------------------------------------------
    async def delete_in_steps(self, name: str) -> None:
        """The catalog first (the topic is gone for every reader), then each partition."""
        k = self.keys
        while True:
            raw = cast("bytes | None", await self.redis.get(k.topic(name)))  # replies are bytes
            if raw is None:
                raise UnknownTopic(f"no such topic: {name}")
            config = TopicConfig.unpack(name, raw)
            marker = f"{config.partitions} {config.topic_id.hex()}"
            try:
                await self.scripts.delete_catalog(
                    keys=[
                        k.topics,
                        k.topic(name),
                        k.steps,
                        k.deleting(name),
                        k.creating(name),
                        k.configuring(name),
                        k.config_versions,
                    ],
                    args=[name, marker, _now_ms(), raw],
                )
            except Conflict:
                continue  # changed meanwhile (partitions added): read it again
            break
        await self._delete_partitions(name, config.partitions, config.topic_id.hex())
        await self._step_done(k.deleting(name), marker)

    async def _delete_partitions(self, name: str, partitions: int, topic_id: str) -> None:
        for p in range(partitions):
            part = self.keys.partition(name, p)
            await self.scripts.delete_partition(
                keys=[part.meta, part.index, part.stats, part.producers],
                args=[part.prefix, topic_id],
            )

    async def _step_done(self, marker: str, value: str) -> None:
        await self.scripts.step_done(keys=[marker, self.keys.steps], args=[value])

    # -- the sweep ----------------------------------------------------------------------------
    async def finish_steps(self, older_than_ms: int = STEP_AGE_MS) -> list[str]:
        """Complete every operation a marker older than ``older_than_ms`` says stopped
        half-way (a crashed broker's); returns the markers finished. Every step is harmless
        to repeat, so brokers sweeping at once, or the operation's own broker still
        running, do no harm. Nothing to do on a single Redis."""
        k = self.keys
        if not k.cluster:
            return []
        # Replies are bytes, and without scores the range is a list of members.
        markers = cast(
            "list[bytes]",
            await self.redis.zrangebyscore(k.steps, "-inf", _now_ms() - older_than_ms),
        )
        finished = []
        for member in markers:
            marker = member.decode()
            value = cast("bytes | None", await self.redis.get(marker))
            if value is None:
                await self.redis.zrem(k.steps, marker)
                continue
            kind, name = marker[len(k.catalog) :].split(":", 1)
            await self._finish(kind, name, value.decode())
            await self._step_done(marker, value.decode())
            finished.append(marker)
        return finished

    async def _finish(self, kind: str, name: str, value: str) -> None:
        k = self.keys
        if kind == "deleting":
            partitions, topic_id = value.split()
            await self._delete_partitions(name, int(partitions), topic_id)
            return
        try:
            config = await self.catalog.topic(name)
        except UnknownTopic:
            return  # deleted since: its deletion's marker says what is left to do
        if kind == "creating" and config.topic_id.hex() != value:
            return  # deleted and created again: that creation is another marker's
        # Read after the catalog step, as its own creator would have.
        switch, floor = await self.redis.mget(k.archiving, k.sequence_floor)
        archiving = int(switch is not None)
        if kind == "creating":
            await self._create_partitions(
                config, range(config.partitions), archiving, int(floor or 0), 0
            )
        elif kind == "configuring":
            await self._apply_config(config, int(value), archiving, int(floor or 0))

    # -- archiving and restore ----------------------------------------------------------------
    async def enable_archiving_in_steps(self, done: bytes) -> None:
        """The switch first (creators read it after their catalog step), then
        archive_on.lua per partition of every topic listed after it, then the switch's
        final value: a crash before it makes the next call do it all again."""
        k = self.keys
        await self.redis.set(k.archiving, ARCHIVING_PENDING)
        names = cast("set[bytes]", await self.redis.smembers(k.topics))  # replies are bytes
        for name in sorted(n.decode() for n in names):
            raw = cast("bytes | None", await self.redis.get(k.topic(name)))
            if raw is None:
                continue  # being deleted
            for p in range(TopicConfig.unpack(name, raw).partitions):
                part = k.partition(name, p)
                await self.scripts.archive_on(keys=[part.meta, part.index], args=[part.prefix])
        await self.redis.set(k.archiving, done)

    async def restore_in_steps(self, topics: list[RestoredTopic], sequence_floor: int) -> None:
        """Each topic's catalog entry (only if missing), then restore.lua per partition,
        with its slot's counter raised past every id the archive has seen."""
        k = self.keys
        counter = counter_of(sequence_floor)
        for t in topics:
            c = t.config
            pipe = self.redis.pipeline(transaction=True)
            pipe.set(k.topic(c.name), c.pack(), nx=True)
            pipe.sadd(k.topics, c.name)
            await pipe.execute()
            for number, p in enumerate(t.partitions):
                part = k.partition(c.name, number)
                await self.scripts.restore(
                    keys=[part.meta, part.index, part.stats],
                    args=[
                        c.name,
                        c.pack(),
                        c.lua_settings(),
                        p.log_end,
                        p.leader_epoch,
                        p.log_start,
                    ],
                )
                await self.scripts.slot_tick(
                    keys=[k.slot_hash(slot_of(c.name, number))], args=[counter]
                )
        await self._raise_sequence_floor(counter)

    async def _raise_sequence_floor(self, floor: int) -> None:
        """The catalog's sequence floor: only ever raised."""
        k = self.keys
        while True:
            async with self.redis.pipeline(transaction=True) as pipe:
                await pipe.watch(k.sequence_floor)
                current = int(await pipe.get(k.sequence_floor) or 0)
                if current >= floor:
                    return
                pipe.multi()
                pipe.set(k.sequence_floor, floor)
                try:
                    await pipe.execute()
                    return
                except WatchError:
                    continue
