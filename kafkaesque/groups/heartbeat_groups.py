"""What the coordinators of heartbeat-driven groups share: KIP-848 consumer groups
(kafkaesque/groups/consumer.py) and KIP-932 share groups (kafkaesque/groups/share/
coordinator.py), whose members only heartbeat, each group one value in Redis
(kafkaesque/hot/group_store.py ``GroupStates``) with its members' heartbeats beside it.

``HeartbeatGroups`` is their common base: the group's effective config, the expiry sweep
and its timers, the listing, DeleteGroups; ``topic_entries`` reads the subscribed topics'
ids and sizes.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Generic, Protocol, Self, TypeVar

from kafkaesque.clock import Clock
from kafkaesque.errors import Code, UnknownTopic
from kafkaesque.groups.types import ExpiryTimers
from kafkaesque.hot.group_store import GroupStates, StoredGroup

if TYPE_CHECKING:
    from kafkaesque.hot.log import Log

# How often a heartbeat re-reads the subscribed topics (new topics matching a regex, new
# partitions) when nothing else made it: Kafka's metadata refresh, roughly.
TOPIC_REFRESH_MS = 1000


class KindConfig(Protocol):
    """A kind of group's broker config, which a group's own dynamic configs override."""

    def for_group(self, configs: Mapping[str, str]) -> Self: ...


class LiveGroup(StoredGroup, Protocol):
    @property
    def state(self) -> str: ...


GroupT = TypeVar("GroupT", bound=LiveGroup)
ConfigT = TypeVar("ConfigT", bound=KindConfig)


class HeartbeatGroups(abc.ABC, Generic[GroupT, ConfigT]):
    """A coordinator of one kind of heartbeat-driven group over ``store``; subclasses say
    how a group expires (``tick``, ``_next_expiry``)."""

    def __init__(
        self, log: Log, store: GroupStates[GroupT], config: ConfigT, clock: Clock, what: str
    ) -> None:
        self.log = log
        self.clock = clock  # members' sessions are on it
        self.store = store
        self.config = config
        self.timers = ExpiryTimers(what, clock)

    async def load(self, group_id: str) -> GroupT | None:
        return await self.store.load(group_id)

    async def group_config(self, group_id: str) -> ConfigT:
        """The broker's config with the group's own dynamic group configs, where set."""
        return self.config.for_group(await self.store.configs(group_id))

    async def listing(self, group_ids: list[str]) -> dict[str, str]:
        """Of ``group_ids``, the groups of this kind and their states (for ListGroups)."""
        return {g: group.state for g, group in (await self.store.load_many(group_ids)).items()}

    async def delete(self, group_id: str) -> Code | None:
        """DeleteGroups of a group of this kind (None: it is none): refused with members."""
        async with self.store.lock(group_id):
            group = await self._current(group_id)
            if group is None:
                return None
            if group.members:
                return Code.NON_EMPTY_GROUP
            await self.store.delete(group_id)
        return Code.NONE

    async def _current(self, group_id: str) -> GroupT | None:
        """The group as DeleteGroups judges it; under the group's lock."""
        return await self.store.load(group_id)

    # -- expiry ---------------------------------------------------------------------------
    @abc.abstractmethod
    async def tick(self, group_id: str) -> None:
        """Remove the members that are due; under the group's lock."""

    @abc.abstractmethod
    def _next_expiry(
        self, group: GroupT, heartbeats: dict[str, int], config: ConfigT
    ) -> int | None:
        """When (ms) the group's next member is due to be removed; None: none is."""

    async def tick_all(self) -> None:
        """Tick the groups with members (``Broker._expire_members``, every 0.5 s): one
        round trip reads them all, and only a group with a member due is locked and
        changed; the others get a timer for their next expiry, so a session ends on the
        millisecond, as Kafka's timers end it, not at the next tick."""
        active = await self.store.active()
        now = self.clock.now_ms()
        for group_id, group, heartbeats, configs in active:
            if group is None:
                await self.tick(group_id)  # unlists it
                continue
            due = self._next_expiry(group, heartbeats, self.config.for_group(configs))
            if due is not None and due <= now:
                await self.tick(group_id)
            else:
                self.timers.arm(group_id, due, self.tick)

    def _arm(self, group: GroupT, heartbeats: dict[str, int], config: ConfigT) -> None:
        """A timer that ticks the group when its next member is due, if that comes before
        the next periodic tick would; the earliest timer per group wins."""
        self.timers.arm(group.group_id, self._next_expiry(group, heartbeats, config), self.tick)

    def close(self) -> None:
        """Stop the expiry timers (the broker is stopping)."""
        self.timers.close()


async def topic_entries(log: Log, names: Iterable[str]) -> dict[str, list]:
    """The topics' [topic id, partition count], sorted by name, of those that exist."""
    out: dict[str, list] = {}
    for name in sorted(names):
        try:
            config = await log.topic(name)
        except UnknownTopic:
            continue
        out[name] = [config.topic_id, config.partitions]
    return out
