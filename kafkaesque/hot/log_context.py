"""What the parts of kafkaesque.hot.log.Log share: the Redis client and its scripts, the key
layout, the archive, and the per-process fields the broker sets on its Log."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from kafkaesque.hot.keys import Keys
from kafkaesque.hot.log_types import ColdStore
from kafkaesque.hot.scripts import Scripts


class LogContext:
    """The state every part of a Log (kafkaesque/hot/log.py) is built with: one per Log.

    ``redis``, ``ns``, ``cluster``, ``keys`` and ``scripts`` never change;
    the others are set from outside through the Log (its properties of the same names)."""

    __slots__ = (
        "capped",
        "cluster",
        "cold",
        "highest_sequence",
        "keys",
        "node",
        "ns",
        "on_append",
        "recover",
        "redis",
        "scripts",
    )

    def __init__(
        self, redis: Redis, namespace: str, cluster: bool, cold: ColdStore | None = None
    ) -> None:
        self.redis = redis
        self.ns = namespace
        self.cluster = cluster
        self.keys = Keys(namespace, cluster)
        self.scripts = Scripts(redis)
        # Serves offsets Redis no longer holds (the archive).
        self.cold = cold
        # Called when Redis turns out to have lost its data, before any append (the Log's
        # ``recover`` applied to the Log); None: the log starts afresh.
        self.recover: Callable[[], Awaitable[None]] | None = None
        # The highest sequence number appends through this Log were given (on a cluster,
        # the floor of the next: one broker's successive appends get growing ids).
        self.highest_sequence = 0
        # The broker appending through this log (kafkaesque.partition.leadership): its
        # appends to a partition another broker leads are refused. "" (the CLI, tools):
        # never refused.
        self.node = ""
        # Where Redis replicas are required (kafkaesque/hot/high_watermark.py): reads stop
        # at each partition's high watermark, and ``on_append`` hears of every append.
        self.capped = False
        self.on_append: Callable[[str, int], None] | None = None


class LogPart:
    """A part of a Log (appends, reads, topics, ...): its context, and the context's
    fields every part reads held directly (``redis``, ``scripts``, ``keys``, ``cluster``)."""

    def __init__(self, context: LogContext) -> None:
        self.context = context
        self.redis = context.redis
        self.scripts = context.scripts
        self.keys = context.keys
        self.cluster = context.cluster
