"""The topic side of the log: create, configure, list and delete topics; recovery first."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import msgpack
from redis.asyncio import Redis

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import Conflict, NeedsRecovery, StorageUnavailable, UnknownTopic
from kafkaesque.hot.keys import Keys
from kafkaesque.hot.log_types import ColdStore
from kafkaesque.hot.scripts import Scripts

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from kafkaesque.hot.log import Log


class TopicsLog:
    """Methods of kafkaesque.hot.log.Log on whole topics, and the recovery every write and
    every topic lookup goes through when Redis lost its data."""

    redis: Redis
    scripts: Scripts
    keys: Keys
    cold: ColdStore | None
    recover: Callable[[Log], Awaitable[None]] | None

    async def create_topic(self, config: TopicConfig) -> TopicConfig:
        """Create the topic; its partitions enforce its configs with the broker's defaults
        as stored in Redis."""
        config.defaults = await self.topic_defaults()
        config.validate()
        k = self.keys
        if k.cluster:  # the partitions are in different slots: in steps
            await self._create_in_steps(config)  # type: ignore[attr-defined]
            return config
        metas = [k.partition(config.name, p).meta for p in range(config.partitions)]
        await self._call(
            self.scripts.create,
            keys=[k.topics, k.topic(config.name), k.incarnation, k.archiving, *metas],
            args=[config.name, config.pack(), config.lua_settings()],
        )
        return config

    async def _call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """Run a script that refuses to write while Redis has lost its data: recover first
        (restore from the archive, or start afresh without one), then run it again."""
        try:
            return await script(keys=keys, args=args)
        except NeedsRecovery:
            await self._recover_or_unknown()
        return await script(keys=keys, args=args)

    async def _recover_or_unknown(self) -> None:
        """After a script's NEEDS_RECOVERY: recover. On a cluster a partition's scripts
        take its meta for the recovery marker (the catalog's is in another slot), so a
        partition that does not exist says it too: unknown unless the catalog lost its
        data."""
        if self.keys.cluster and not await self.needs_recovery():
            raise UnknownTopic("unknown topic or partition")
        await self.ensure_recovered()

    async def needs_recovery(self) -> bool:
        return not await self.redis.exists(self.keys.incarnation)

    async def ensure_recovered(self) -> None:
        """If Redis lost its data, restore offsets (through ``recover``) before appends."""
        if await self.needs_recovery():
            if self.recover is not None:
                await self.recover(cast("Log", self))  # only Log inherits this
            await self.redis.set(self.keys.incarnation, uuid.uuid4().hex, nx=True)

    async def topic(self, name: str) -> TopicConfig:
        """The topic's config, with the broker's defaults (one round trip)."""
        # Replies are bytes: the client does not decode them (here and below).
        data, defaults = cast(
            "list[bytes | None]",
            await self.redis.mget(self.keys.topic(name), self.keys.topic_defaults),
        )
        if data is None and self.recover is not None and await self.needs_recovery():
            # Redis lost its data: the archive may know the topic (restored here).
            await self.ensure_recovered()
            data = cast("bytes | None", await self.redis.get(self.keys.topic(name)))
        if data is None:
            raise UnknownTopic(f"no such topic: {name}")
        return TopicConfig.unpack(name, data, defaults)

    async def topic_defaults(self) -> dict[str, str]:
        """The broker's topic config defaults (``serve --config``)."""
        raw = await self.redis.get(self.keys.topic_defaults)
        return msgpack.unpackb(raw) if raw else {}

    async def set_topic_defaults(self, defaults: dict[str, str]) -> list[str]:
        """Make ``defaults`` (topic config name -> canonical value) the broker's topic
        defaults and apply them to every topic's partitions; returns the topics changed.
        Every topic is configured again even when the defaults did not change, so a run
        stopped halfway (a crash, Redis away) is completed by the next. A topic with a
        partition on a Redis Cluster shard that is away is left for the next run (logged),
        so a broker starts and serves the others meanwhile."""
        previous = await self.topic_defaults()
        await self.redis.set(self.keys.topic_defaults, msgpack.packb(defaults))
        changed = []
        for name in await self.list_topics():
            try:
                after = await self.configure_topic(name, lambda c: c)
            except UnknownTopic:
                continue  # deleted meanwhile
            except StorageUnavailable as exc:
                log.warning("topic defaults not applied to %s for now: %s", name, exc)
                continue
            before = after.replace(defaults=previous)
            if before.lua_settings() != after.lua_settings():
                changed.append(name)
        return changed

    async def add_partitions(self, name: str, count: int) -> TopicConfig:
        """Grow a topic to ``count`` partitions (never shrink, as in Kafka)."""
        return await self.configure_topic(name, lambda config: config.grown(count))

    async def configure_topic(
        self, name: str, change: Callable[[TopicConfig], TopicConfig]
    ) -> TopicConfig:
        """Change a topic's config (its configs, its partition count) atomically: ``change``
        gets the current config and returns the new one (validated here), which every
        partition then enforces. Retried if another client changed the topic meanwhile."""
        while True:
            raw, defaults = cast(
                "list[bytes | None]",
                await self.redis.mget(self.keys.topic(name), self.keys.topic_defaults),
            )
            if raw is None:
                raise UnknownTopic(f"no such topic: {name}")
            current = TopicConfig.unpack(name, raw, defaults)
            changed = change(current)
            changed.validate()
            if self.keys.cluster:  # in steps: kafkaesque/hot/log_steps.py
                try:
                    await self._configure_in_steps(raw, current, changed)  # type: ignore[attr-defined]
                    return changed
                except Conflict:
                    continue
            metas = [self.keys.partition(name, p).meta for p in range(changed.partitions)]
            try:
                await self.scripts.configure(
                    keys=[self.keys.topic(name), self.keys.archiving, *metas],
                    args=[raw, changed.pack(), changed.lua_settings(), current.partitions],
                )
                return changed
            except Conflict:
                continue  # another client changed the topic between our read and write

    async def list_topics(self) -> list[str]:
        if self.recover is not None:
            await self.ensure_recovered()  # after a loss of Redis' data, list what is restored
        names = cast("set[bytes]", await self.redis.smembers(self.keys.topics))
        return sorted(n.decode() for n in names)

    async def topic_ids(self) -> dict[bytes, str]:
        """Every topic's id -> its name (two round trips whatever the number of topics)."""
        names = await self.list_topics()
        if not names:
            return {}
        packed = await self.redis.mget([self.keys.topic(n) for n in names])
        # A topic deleted between the two reads has no config any more.
        return {
            msgpack.unpackb(data)["id"]: n for n, data in zip(names, packed, strict=True) if data
        }

    async def topic_configs(self) -> list[TopicConfig]:
        """Every topic's config (two round trips whatever the number of topics)."""
        names = await self.list_topics()
        if not names:
            return []
        *packed, defaults = cast(
            "list[bytes | None]",
            await self.redis.mget([*(self.keys.topic(n) for n in names), self.keys.topic_defaults]),
        )
        return [  # a topic deleted between the two reads has no config any more
            TopicConfig.unpack(n, data, defaults)
            for n, data in zip(names, packed, strict=True)
            if data
        ]

    async def announce_change(self, topic: str) -> None:
        """The topic changed other than by an append (deleted, records deleted, restored):
        an empty message on its channel makes waiting and caching readers read it again."""
        await self.redis.publish(self.keys.appended(topic), "")

    async def delete_topic(self, name: str) -> None:
        """Delete the topic and its records, the archived ones first: if the archive cannot
        be reached, nothing is deleted. A topic only the archive still has (deleted while
        no archive was attached) is deleted from it."""
        try:
            config = await self.topic(name)
        except UnknownTopic:
            if self.cold is None or not await self.cold.delete_topic(name, None, 0):
                raise
            return
        if self.cold is not None:
            await self.cold.delete_topic(name, config.topic_id, config.partitions)
        if self.keys.cluster:  # in steps: kafkaesque/hot/log_steps.py
            await self._delete_in_steps(name)  # type: ignore[attr-defined]
            await self.announce_change(name)
            return
        parts = [self.keys.partition(name, p) for p in range(config.partitions)]
        await self.scripts.delete(
            keys=[
                self.keys.topics,
                self.keys.topic(name),
                *(k for p in parts for k in (p.meta, p.index, p.stats, p.producers)),
            ],
            args=[name, *(p.prefix for p in parts)],
        )
        await self.announce_change(name)
