"""Redis memory as the hot tier's limit: know before Redis is full, and make room.

Redis at its maxmemory (noeviction) refuses every write: appends would hang in client
retries, group commits fail. The broker watches INFO memory once a second. Above the
high mark it releases archived closed pages (the archive serves those offsets) and
throttles producers more the closer Redis gets to full; above the full mark appends are
refused with a retriable error before they reach Redis, while the archiver drains. Nothing
acknowledged is dropped: only pages already archived are released, and an eviction
policy other than noeviction, which would drop records, is warned about at start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from kafkaesque.errors import HotTierFull
from kafkaesque.hot.outage import REDIS_CONNECTION_ERRORS, Outage

log = logging.getLogger(__name__)

HIGH = 0.80  # of maxmemory: release archived pages, start throttling producers
FULL = 0.95  # of maxmemory: refuse appends (room stays for group commits and metadata)
MAX_THROTTLE_MS = 1_000  # the throttle at FULL; Kafka's quotas throttle up to seconds
INTERVAL = 0.5  # seconds between looks at INFO memory

# Makes room: deletes archived closed pages (Archiving.release_archived).
ReleaseArchived = Callable[[], Awaitable[int]]

FULL_OUTAGE = Outage("Redis memory", logging.getLogger("kafkaesque.hot.memory"))


@dataclass(frozen=True, slots=True)
class MemoryUse:
    used: int
    limit: int  # maxmemory; 0: none set
    policy: str = "noeviction"

    @property
    def fraction(self) -> float:
        """Used / maxmemory; 0 without a maxmemory."""
        return self.used / self.limit if self.limit else 0.0

    def describe(self) -> str:
        used = _mib(self.used)
        if self.policy == "unknown":
            return "memory use unknown (INFO not allowed)"
        if not self.limit:
            return f"{used} used, no maxmemory set (bounded by the machine)"
        return (
            f"{used} used of {_mib(self.limit)} maxmemory, headroom "
            f"{_mib(self.limit - self.used)} ({100 * (1 - self.fraction):.0f}%)"
        )


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


async def memory_use(redis: Redis) -> MemoryUse:
    """Redis' memory as INFO tells; all zero where INFO is not allowed (a managed Redis
    may rename it), which turns the guard off."""
    try:
        info = await redis.info("memory")
    except ResponseError:
        return MemoryUse(0, 0, "unknown")
    return MemoryUse(
        int(info["used_memory"]),
        int(info.get("maxmemory", 0)),
        str(info.get("maxmemory_policy", "noeviction")),
    )


class MemoryGuard:
    """The broker's watch on Redis memory (see the module's doc)."""

    def __init__(self, redis: Redis, release: ReleaseArchived | None = None) -> None:
        self.redis = redis
        self.release = release
        self.use = MemoryUse(0, 0)
        # Bytes appended since INFO was read: a producer can write far more than the
        # headroom between two looks, so they count as used until the next look.
        self.appended = 0

    @property
    def fraction(self) -> float:
        """Used / maxmemory as last read, with what was appended since; 0 without one."""
        use = self.use
        return (use.used + self.appended) / use.limit if use.limit else 0.0

    def throttle_ms(self) -> int:
        """How long a producer should hold back: 0 below HIGH, rising to MAX_THROTTLE_MS
        at FULL."""
        over = (self.fraction - HIGH) / (FULL - HIGH)
        return 0 if over <= 0 else int(MAX_THROTTLE_MS * min(1.0, over))

    def check_append(self, size: int) -> None:
        """Raise HotTierFull when Redis is too full to take ``size`` more bytes; else
        count them as used until the next look."""
        if self.use.limit and (self.use.used + self.appended + size) / self.use.limit >= FULL:
            error = HotTierFull(f"Redis is nearly full: {self.use.describe()}")
            FULL_OUTAGE.failed(error)
            raise error
        if FULL_OUTAGE.since is not None:
            FULL_OUTAGE.recovered()
        self.appended += size

    async def start(self) -> None:
        await self.look()
        if self.use.limit and self.use.policy != "noeviction":
            log.error(
                "Redis evicts keys when full (maxmemory-policy %s): records can be lost; "
                "set maxmemory-policy noeviction",
                self.use.policy,
            )

    async def look(self) -> None:
        self.use, self.appended = await memory_use(self.redis), 0

    async def watch(self) -> None:
        """Look at INFO memory every INTERVAL; make room while above HIGH."""
        while True:
            await asyncio.sleep(INTERVAL)
            try:
                await self.look()
                if self.use.fraction >= HIGH and self.release is not None:
                    await self.release()
                    await self.look()
            except REDIS_CONNECTION_ERRORS:
                pass  # the client logs the outage; appends fail by themselves meanwhile
