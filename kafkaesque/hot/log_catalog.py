"""The catalog side of the log: topic lookups (configs, defaults, names, ids), the
announcement of a change, and the recovery every write and every topic lookup goes through
when Redis lost its data."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, cast

import msgpack

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import NeedsRecovery, UnknownTopic
from kafkaesque.hot.log_context import LogContext, LogPart


class Catalog(LogPart):
    """The topics as kafkaesque.hot.log.Log finds them, and its recovery."""

    def __init__(self, context: LogContext) -> None:
        super().__init__(context)
        # One recovery at a time: the requests that meet the loss meanwhile wait for it.
        self._recovering = asyncio.Lock()

    async def call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
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
        """If Redis lost its data, restore offsets (through ``recover``) before appends.
        The requests that meet the loss together share one recovery: each run of it reads
        the whole archive, and the group members' sessions it starts must not run out
        while others run theirs."""
        if not await self.needs_recovery():
            return
        async with self._recovering:
            if not await self.needs_recovery():  # recovered while this one waited
                return
            recover = self.context.recover
            if recover is not None:
                await recover()
            await self.redis.set(self.keys.incarnation, uuid.uuid4().hex, nx=True)

    async def topic(self, name: str) -> TopicConfig:
        """The topic's config, with the broker's defaults (one round trip)."""
        # Replies are bytes: the client does not decode them (here and below).
        data, defaults = cast(
            "list[bytes | None]",
            await self.redis.mget(self.keys.topic(name), self.keys.topic_defaults),
        )
        if data is None and self.context.recover is not None and await self.needs_recovery():
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

    async def list_topics(self) -> list[str]:
        if self.context.recover is not None:
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
