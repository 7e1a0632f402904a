"""The topic side of the log: create, configure and delete topics, the broker's defaults."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import cast

import msgpack

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import Conflict, StorageUnavailable, UnknownTopic
from kafkaesque.hot.log_catalog import Catalog
from kafkaesque.hot.log_context import LogContext, LogPart
from kafkaesque.hot.log_steps import Steps

log = logging.getLogger(__name__)


class Topics(LogPart):
    """Changes to whole topics, for kafkaesque.hot.log.Log: on a single Redis one script
    each, on a cluster in ``steps``; lookups and recovery through ``catalog``."""

    def __init__(self, context: LogContext, catalog: Catalog, steps: Steps) -> None:
        super().__init__(context)
        self.catalog = catalog
        self.steps = steps

    async def create_topic(self, config: TopicConfig) -> TopicConfig:
        """Create the topic; its partitions enforce its configs with the broker's defaults
        as stored in Redis."""
        config.defaults = await self.catalog.topic_defaults()
        config.validate()
        k = self.keys
        if k.cluster:  # the partitions are in different slots: in steps
            await self.steps.create_in_steps(config)
            return config
        metas = [k.partition(config.name, p).meta for p in range(config.partitions)]
        await self.catalog.call(
            self.scripts.create,
            keys=[k.topics, k.topic(config.name), k.incarnation, k.archiving, *metas],
            args=[config.name, config.pack(), config.lua_settings()],
        )
        return config

    async def set_topic_defaults(self, defaults: dict[str, str]) -> list[str]:
        """Make ``defaults`` (topic config name -> canonical value) the broker's topic
        defaults and apply them to every topic's partitions; returns the topics changed.
        Every topic is configured again even when the defaults did not change, so a run
        stopped halfway (a crash, Redis away) is completed by the next. A topic with a
        partition on a Redis Cluster shard that is away is left for the next run (logged),
        so a broker starts and serves the others meanwhile."""
        previous = await self.catalog.topic_defaults()
        await self.redis.set(self.keys.topic_defaults, msgpack.packb(defaults))
        changed = []
        for name in await self.catalog.list_topics():
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
                    await self.steps.configure_in_steps(raw, current, changed)
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

    async def delete_topic(self, name: str) -> None:
        """Delete the topic and its records, the archived ones first: if the archive cannot
        be reached, nothing is deleted. A topic only the archive still has (deleted while
        no archive was attached) is deleted from it."""
        cold = self.context.cold
        try:
            config = await self.catalog.topic(name)
        except UnknownTopic:
            if cold is None or not await cold.delete_topic(name, None, 0):
                raise
            return
        if cold is not None:
            await cold.delete_topic(name, config.topic_id, config.partitions)
        if self.keys.cluster:  # in steps: kafkaesque/hot/log_steps.py
            await self.steps.delete_in_steps(name)
            await self.catalog.announce_change(name)
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
        await self.catalog.announce_change(name)
