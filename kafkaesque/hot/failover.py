"""After a failover of the Redis primary: a new leader epoch for every partition.

A failover may promote a replica that lacks the last writes of the old primary; the
offsets of the records it lost will be given to other records. So that a consumer that
read the lost ones finds out (KIP-320: FENCED_LEADER_EPOCH, then OffsetForLeaderEpoch
tells it where to truncate), each partition gets a new leader epoch once per primary
(``failover_epoch.lua``). The primary is told apart by its ``master_replid``, which a
promotion (or a restart) changes; each partition records the one its epoch belongs to,
so several brokers noticing the same failover bump it once (docs/scale-out.md, 4.3).

Through Sentinel, each ``Log``'s client runs ``EpochBump`` on the new primary before its
own commands reach it, so no append lands there under the old epoch. ``FailoverWatch.run``
(``serve``) also checks the primary every ``interval`` seconds, and at once when a
sentinel announces a switch: it bumps for a broker started after a failover, and moves
the client off a demoted primary that still answers.

On a Redis Cluster each shard fails over on its own: the same is done per slot range of
a primary (docs/scale-out.md 4.4). The replication id a range's partitions were last
brought to is recorded in the slot hash of the range's first slot (field ``replid``, on
the shard itself); a change bumps only the partitions whose slot is in the range. The
cluster client runs ``EpochBump`` on a node before its commands reach slots the node did
not serve before (``HotTierCluster.on_switch``), and the watch checks every primary's
replication id each ``interval`` (a primary can change without its address changing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import ConnectionError as RedisConnectionError

from kafkaesque.errors import UnknownTopic
from kafkaesque.hot.keys import Keys
from kafkaesque.hot.outage import REDIS, REDIS_CONNECTION_ERRORS
from kafkaesque.hot.slots import slot_of

if TYPE_CHECKING:
    from kafkaesque.hot.log import Log
    from kafkaesque.hot.tier_sentinel import SentinelHotTier

log = logging.getLogger(__name__)


async def primary_replid(redis: Any) -> str | None:
    """The replication id of the primary ``redis`` reaches; None when it reaches a
    replica (a demoted primary, before the client moves on)."""
    info = await redis.info("replication")
    if info.get("role") != "master":
        return None
    return str(info["master_replid"])


async def bump_epochs(
    target: Log,
    replid: str,
    adopt: bool = False,
    slots: Sequence[tuple[int, int]] | None = None,
) -> int:
    """A new leader epoch for every partition whose epoch belongs to another primary than
    ``replid``'s; with ``adopt``, partitions that record none only record ``replid``.
    With ``slots`` (ranges, both ends included: one shard of a cluster), only the
    partitions whose slot is in them. Returns how many partitions got one."""
    return (await _bump(target, replid, adopt, slots))[0]


async def _bump(
    target: Log, replid: str, adopt: bool, slots: Sequence[tuple[int, int]] | None
) -> tuple[int, set[int]]:
    """``bump_epochs``, and the slots of the partitions it found."""
    bumped = 0
    found: set[int] = set()
    for name in await target.list_topics():
        try:
            config = await target.topic(name)
        except UnknownTopic:
            continue  # deleted meanwhile
        calls = []
        for number in range(config.partitions):
            slot = slot_of(name, number)
            if slots is not None and not _within(slot, slots):
                continue
            found.add(slot)
            p = target.keys.partition(name, number)
            calls.append(([p.meta, p.epochs], [replid, 1 if adopt else 0]))
        if not calls:
            continue
        results = await target.scripts.failover_epoch.many(target.redis, calls)
        for result in results:
            if isinstance(result, Exception):
                raise result
        count = sum(1 for result in results if result > 0)
        if count:
            bumped += count
            await target.announce_change(name)
    return bumped, found


def _within(slot: int, ranges: Sequence[tuple[int, int]]) -> bool:
    return any(first <= slot <= last for first, last in ranges)


@dataclass(frozen=True, slots=True)
class EpochBump:
    """Bring the log in ``namespace`` to the primary a client reaches: when the primary's
    replication id is not the one recorded (``NS:primary_replid``), bump the partitions'
    epochs and record it (the first time, with no id recorded, partitions only adopt it).
    A Sentinel client runs it before its commands reach a primary
    (kafkaesque.hot.tier_sentinel.BlockingSentinelPool): two round trips when nothing changed. Equal
    for equal namespaces, so a client holds it once per log.

    On a cluster (``ranges`` and ``cluster`` given: the slot ranges ``primary`` serves,
    kafkaesque.hot.tier_cluster.HotTierCluster.on_switch), the same per range, the id
    recorded in the slot hash of the range's first slot.

    ``make_log`` is the Log class (passed in: the Log module registers this hook)."""

    namespace: str
    make_log: Callable[[Any, str], Log]

    async def __call__(
        self,
        primary: Any,
        ranges: Sequence[tuple[int, int]] | None = None,
        cluster: Any = None,
    ) -> int:
        """The number of partitions given a new epoch."""
        replid = await primary_replid(primary)
        if replid is None:  # named by the sentinel, not yet promoted
            raise RedisConnectionError("it is not a primary yet")
        if ranges is not None:
            return await self._cluster_ranges(primary, replid, ranges, cluster)
        key = Keys(self.namespace).primary_replid
        recorded = await primary.get(key)
        if recorded is not None and recorded.decode() == replid:
            return 0
        bumped = await bump_epochs(
            self.make_log(primary, self.namespace), replid, adopt=recorded is None
        )
        await primary.set(key, replid)
        if bumped:
            log.warning(
                "the Redis primary changed (replication id %s): %d partition(s) got a new "
                "leader epoch; consumers that read records the new primary lacks truncate",
                replid,
                bumped,
            )
        return bumped

    async def _cluster_ranges(
        self, primary: Any, replid: str, ranges: Sequence[tuple[int, int]], cluster: Any
    ) -> int:
        """One shard of a cluster: its ranges whose recorded id is not ``replid``'s get
        their partitions bumped (adopted where none is recorded), then record it, in the
        ranges that hold partitions only (an empty log keeps no key; an empty range is
        walked again at each check, which finds nothing to do)."""
        keys = Keys(self.namespace, cluster=True)
        pipe = primary.pipeline(transaction=False)
        for first, _last in ranges:
            pipe.hget(keys.slot_hash(first), "replid")
        recorded = await pipe.execute()
        # What this client saw there before (HotTierCluster.replids, by slot): a range
        # with no record yet (no partitions when last walked) is adopted only if no other
        # primary was seen serving it.
        known = getattr(cluster, "replids", None)
        stale: dict[bool, list[tuple[int, int]]] = {True: [], False: []}  # by adopt
        for (first, last), value in zip(ranges, recorded, strict=True):
            if value is not None and value.decode() == replid:
                continue
            moved = known is not None and any(
                seen not in (None, replid) for seen in known[first : last + 1]
            )
            stale[value is None and not moved].append((first, last))
        if not stale[True] and not stale[False]:
            _remember(known, ranges, replid)
            return 0
        target = self.make_log(cluster, self.namespace)
        bumped = 0
        found: set[int] = set()
        for adopt, which in stale.items():
            if which:
                count, slots = await _bump(target, replid, adopt, which)
                bumped += count
                found |= slots
        holding = [
            (first, last)
            for first, last in stale[True] + stale[False]
            if any(first <= slot <= last for slot in found)
        ]
        if holding:
            pipe = primary.pipeline(transaction=False)
            for first, _last in holding:
                pipe.hset(keys.slot_hash(first), "replid", replid)
            await pipe.execute()
        _remember(known, ranges, replid)
        if bumped:
            log.warning(
                "the Redis Cluster primary of slots %s changed (replication id %s): %d "
                "partition(s) got a new leader epoch; consumers that read records the new "
                "primary lacks truncate",
                ",".join(f"{a}-{b}" for a, b in stale[False]),
                replid,
                bumped,
            )
        return bumped


def _remember(
    known: list[str | None] | None, ranges: Sequence[tuple[int, int]], replid: str
) -> None:
    if known is not None:
        for first, last in ranges:
            known[first : last + 1] = [replid] * (last - first + 1)


class FailoverWatch:
    """Follows the primary of ``target``'s Redis and bumps the epochs when it changes."""

    def __init__(self, target: Log, interval: float = 1.0) -> None:
        self.log = target
        self.interval = interval
        self._switched = asyncio.Event()

    async def check(self) -> int:
        """Look at the primary once; the number of partitions given a new epoch here (a
        Sentinel client's own hook may have given them already)."""
        redis = self.log.redis
        if hasattr(redis, "check_primaries"):  # a cluster: every shard's primary
            return int(await redis.check_primaries())
        if hasattr(redis, "primary_address"):  # through Sentinel: move to the one it names
            await redis.primary_address()
        return await EpochBump(self.log.ns, type(self.log))(redis)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Check until ``stop`` is set; Redis being away is retried."""
        follower = None
        if hasattr(self.log.redis, "switches"):
            follower = asyncio.create_task(self._follow(), name="sentinel switches")
        try:
            while stop is None or not stop.is_set():
                try:
                    await self.check()
                except REDIS_CONNECTION_ERRORS as exc:
                    REDIS.failed(exc)  # once per outage; the next check retries
                waits = [asyncio.ensure_future(self._switched.wait())]
                if stop is not None:
                    waits.append(asyncio.ensure_future(stop.wait()))
                try:
                    await asyncio.wait(waits, timeout=self.interval, return_when="FIRST_COMPLETED")
                finally:
                    for waiting in waits:
                        waiting.cancel()
                self._switched.clear()
        finally:
            if follower is not None:
                follower.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await follower

    async def _follow(self) -> None:
        """Wake the loop at each ``+switch-master`` of the service."""
        while True:
            try:
                # Followed only for a client that has ``switches`` (a SentinelHotTier: above).
                async for _ in cast("SentinelHotTier", self.log.redis).switches():
                    self._switched.set()
            except asyncio.CancelledError:
                raise
            except Exception:  # the sentinel went away: polling goes on meanwhile
                pass
            await asyncio.sleep(1)
