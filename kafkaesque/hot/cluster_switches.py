"""A Redis Cluster's primaries as the hot tier's client tracks them through failovers.

This module owns docs/scale-out.md 4.4 for the cluster client (kafkaesque/
hot_tier_cluster.py ``HotTierCluster``, which holds one ``PrimarySwitches`` as
``switches``): each slot remembers the primary its switch hooks (kafkaesque/hot/failover.py
``EpochBump``) ran for. When the slot map names another one (a replica promoted, a MOVED
to a new owner), the hooks run on it before any command of the client reaches it there;
until they succeed, such commands fail as retriable (HotTierUnavailable). The periodic
watch's ``check_primaries`` runs them on every primary, re-reading the slot map only when
a node's CLUSTER SLOTS differs from the client's.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from redis.exceptions import AskError, MovedError, RedisClusterException, RedisError

from kafkaesque.errors import HotTierUnavailable
from kafkaesque.hot.slots import SLOTS
from kafkaesque.hot.tier import HotTier

if TYPE_CHECKING:
    from kafkaesque.hot.tier_cluster import HotTierCluster

# Set while the switch hooks of a new primary run: their own commands reach it unchecked.
SWITCHING: ContextVar[bool] = ContextVar("kafkaesque_cluster_switching", default=False)

# Called with a client of a node that became the primary of ``ranges`` (slot ranges, first
# and last included) and the cluster client, before other commands of the client reach
# those slots there (kafkaesque.hot.failover.EpochBump gives their partitions a new epoch).
ClusterSwitchHook = Callable[[HotTier, Sequence[tuple[int, int]], "HotTierCluster"], Awaitable[Any]]


class PrimarySwitches:
    """The switch hooks of one cluster client and, by slot, the primary they ran for."""

    def __init__(self, cluster: HotTierCluster) -> None:
        self.cluster = cluster
        self.hooks: list[ClusterSwitchHook] = []
        # By slot: the primary the hooks ran for; the nodes serving slots they did not yet.
        self.confirmed: list[str | None] = [None] * SLOTS
        self.unconfirmed: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._seen_slot_map: object = None  # the slot map ``unconfirmed`` was computed from
        _follow_moves(cluster)

    def add(self, hook: ClusterSwitchHook) -> None:
        """Run ``hook`` on every node that becomes the primary of slots (the first time the
        slot map is read, then at each failover), before the client's commands reach it
        there."""
        if hook not in self.hooks:
            self.hooks.append(hook)
            self.confirmed = [None] * SLOTS
            self._seen_slot_map = None

    def primary_ranges(self) -> dict[str, list[tuple[int, int]]]:
        """By primary (``host:port``), the slot ranges it serves in the slot map."""
        ranges: dict[str, list[tuple[int, int]]] = {}
        cache = self.cluster.nodes_manager.slots_cache
        start, owner = 0, None
        for slot in range(SLOTS + 1):
            nodes = cache.get(slot) if slot < SLOTS else None
            name = nodes[0].name if nodes else None
            if name != owner:
                if owner is not None:
                    ranges.setdefault(owner, []).append((start, slot - 1))
                start, owner = slot, name
        return ranges

    def note_new_primaries(self) -> None:
        """Once per slot map read (each reading makes a new one, whichever path read it):
        the primaries that serve slots the hooks have not run for on them."""
        cache = self.cluster.nodes_manager.slots_cache
        if cache is self._seen_slot_map or not self.hooks:
            return
        self._seen_slot_map = cache
        unconfirmed = set()
        for slot in range(SLOTS):
            nodes = cache.get(slot)
            if nodes and nodes[0].name != self.confirmed[slot]:
                unconfirmed.add(nodes[0].name)
        self.unconfirmed = unconfirmed

    async def confirm(self, name: str) -> int:
        """Run the switch hooks on primary ``name`` for the slots it serves that they did
        not run for; HotTierUnavailable while they fail (its new slots wait)."""
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self.unconfirmed:
                return 0
            ranges = self.primary_ranges().get(name, [])
            bumped = await self._run_hooks(name, _split(ranges, self.confirmed, name))
            for first, last in ranges:
                self.confirmed[first : last + 1] = [name] * (last - first + 1)
            self.unconfirmed.discard(name)
            return bumped

    async def moved(self, slot: int) -> None:
        """A MOVED named ``slot``'s new primary (a manual failover, its old primary still
        up, or a resharding): the hooks run there for that slot before redis-py sends the
        command again (its MOVED retries do not pass the client's ``_execute_command``)."""
        nodes = self.cluster.nodes_manager.slots_cache.get(slot)
        if not nodes or not self.hooks or SWITCHING.get():
            return
        name = nodes[0].name
        if self.confirmed[slot] == name:
            return
        async with self._locks.setdefault(name, asyncio.Lock()):
            if self.confirmed[slot] != name:
                await self._run_hooks(name, [(slot, slot)])
                self.confirmed[slot] = name

    async def check_primaries(self, timeout: float = 5.0) -> int:
        """Read the slot map and run the switch hooks on every primary for all its slots
        (a primary can change without its address changing: a restart, a failover and
        back), all at once, each given ``timeout`` seconds; the number of partitions
        given a new epoch. Raises HotTierUnavailable naming the primaries that could not
        be checked, after checking the others."""
        await self._refresh_if_changed()
        self.note_new_primaries()

        async def check(name: str, ranges: list[tuple[int, int]]) -> int:
            async with self._locks.setdefault(name, asyncio.Lock()):
                bumped = await self._run_hooks(name, ranges)
                for first, last in ranges:
                    self.confirmed[first : last + 1] = [name] * (last - first + 1)
                self.unconfirmed.discard(name)
                return bumped

        checks = [
            asyncio.wait_for(check(name, ranges), timeout)
            for name, ranges in self.primary_ranges().items()
        ]
        results = await asyncio.gather(*checks, return_exceptions=True)
        failures = []
        for result in results:
            if isinstance(result, asyncio.TimeoutError):
                failures.append(f"a primary did not answer in {timeout} s")
            elif isinstance(result, HotTierUnavailable):
                failures.append(str(result))
            elif isinstance(result, BaseException):
                raise result
        if failures:
            raise HotTierUnavailable("; ".join(failures))
        return sum(r for r in results if isinstance(r, int))

    async def _refresh_if_changed(self) -> None:
        """Read the slot map again if a node's CLUSTER SLOTS differs from ours: redis-py
        marks every connection for reconnection at each reading, too much once a second."""
        cluster = self.cluster
        if cluster._initialize:
            await cluster.initialize()
        # Not held back by a primary whose hooks fail: this answer is what mends the map
        # when they fail because it is wrong (the default node is such a primary too).
        token = SWITCHING.set(True)
        try:
            answer = await cluster.execute_command("CLUSTER SLOTS")
        finally:
            SWITCHING.reset(token)
        theirs = {
            (int(first), int(last)): f"{v['primary'][0]}:{v['primary'][1]}"
            for (first, last), v in answer.items()
        }
        ours = {r: name for name, ranges in self.primary_ranges().items() for r in ranges}
        if theirs != ours:
            await cluster.refresh_slots()

    async def _run_hooks(self, name: str, ranges: Sequence[tuple[int, int]]) -> int:
        if not ranges:
            return 0
        host, _, port = name.rpartition(":")
        client = self.cluster.node_client(host, int(port))
        token = SWITCHING.set(True)
        bumped = 0
        try:
            for hook in self.hooks:
                result = await hook(client, ranges, self.cluster)
                bumped += result if isinstance(result, int) else 0
        except (HotTierUnavailable, RedisError, RedisClusterException) as exc:
            if _redirected(exc):
                # The node no longer serves a slot the map gives it (a migration or a
                # failover the map was read in the middle of): read the map again before
                # the next command, else every command for the node waits on these hooks,
                # failing the same way, and no command ever reaches a node to be moved.
                self.cluster.slot_map_outdated()
            raise HotTierUnavailable(
                f"{name}, the primary of slots {_ranges_text(ranges)}, is not ready: {exc}"
            ) from exc
        finally:
            SWITCHING.reset(token)
        return bumped


def _follow_moves(cluster: HotTierCluster) -> None:
    """Make the client's NodesManager call ``PrimarySwitches.moved`` after redis-py moved a
    slot on a MOVED reply (a class of its own: the manager has slots, no attribute can be
    set; the client is held weakly, as the manager is the client's)."""
    manager = cluster.nodes_manager
    base = type(manager)
    move = getattr(base, "move_slot", None)
    if move is None or not asyncio.iscoroutinefunction(move):  # another redis-py
        return
    owner = weakref.ref(cluster)

    async def move_slot(self: Any, error: Any) -> Any:
        result = await move(self, error)
        client = owner()
        if client is not None:
            await client.switches.moved(error.slot_id)
        return result

    manager.__class__ = type("_NodesManager", (base,), {"__slots__": (), "move_slot": move_slot})


def _split(
    ranges: Sequence[tuple[int, int]], confirmed: list[str | None], name: str
) -> list[tuple[int, int]]:
    """The parts of ``ranges`` whose slots are not confirmed for ``name``."""
    parts = []
    for first, last in ranges:
        start = None
        for slot in range(first, last + 2):
            fresh = slot <= last and confirmed[slot] != name
            if fresh and start is None:
                start = slot
            elif not fresh and start is not None:
                parts.append((start, slot - 1))
                start = None
    return parts


def _redirected(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an error it was raised from, is a MOVED or an ASK."""
    while exc is not None:
        if isinstance(exc, MovedError | AskError):
            return True
        exc = exc.__cause__
    return False


def _ranges_text(ranges: Sequence[tuple[int, int]]) -> str:
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)
