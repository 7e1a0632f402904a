"""The Redis client every command and the broker use.

``--redis-url`` is a plain Redis (``redis://``, ``rediss://``, ``unix://``) or a primary
found through Sentinel: ``redis+sentinel://h1:26379,h2:26379/SERVICE[/db]`` with the
options ``password`` (of the data nodes) and ``sentinel_password`` (of the sentinels).
Through Sentinel the client asks for the primary on every new connection, and a READONLY
reply from a demoted primary drops the connection, so commands reach the new primary
after a failover (docs/scale-out.md, section 4). A Redis Cluster
(``redis+cluster://h1:p1,h2:p2``) fails over per shard; its client follows each and gives
the shard's partitions a new leader epoch (kafkaesque.hot.tier_cluster, section 4.4).
"""

from __future__ import annotations

import redis.connection
from redis.asyncio import BlockingConnectionPool

from kafkaesque.hot.log import Log
from kafkaesque.hot.tier import DEFAULT_MAX_CONNECTIONS, POOL_OPTIONS, POOL_TIMEOUT, HotTier
from kafkaesque.hot.tier_cluster import HotTierCluster, cluster_client, is_cluster_url
from kafkaesque.hot.tier_sentinel import (
    SENTINEL_FORM,
    SENTINEL_SCHEME,
    SentinelHotTier,
    parse_sentinel_url,
    sentinel_client,
)

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "SENTINEL_FORM",
    "SENTINEL_SCHEME",
    "HotTier",
    "HotTierCluster",
    "SentinelHotTier",
    "open_log",
    "parse_sentinel_url",
    "redis_client",
]


def redis_client(
    url: str, max_connections: int = DEFAULT_MAX_CONNECTIONS, password: str | None = None
) -> HotTier:
    """A client whose pool waits for a free connection when all ``max_connections`` are
    busy. redis-py's default pool raises MaxConnectionsError at its limit instead, which
    failed every request beyond the 100th in flight. ``password`` counts only when the
    URL has none (rediss:// URLs connect over TLS, redis-py's ssl_* query options apply).
    A ``redis+cluster://`` URL gives a ``HotTierCluster``, a ``redis+sentinel://`` one a
    ``SentinelHotTier`` following the primary."""
    if is_cluster_url(url):  # a Redis Cluster: below
        return cluster_client(url, max_connections, password)  # type: ignore[return-value]
    if url.startswith(SENTINEL_SCHEME + "://"):
        return sentinel_client(parse_sentinel_url(url), max_connections, password)
    extra = {} if password is None else {"password": password}
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=POOL_TIMEOUT,
        socket_connect_timeout=5,
        **POOL_OPTIONS,
        **extra,
    )
    return HotTier.from_pool(pool)


def open_log(
    url: str, max_connections: int = DEFAULT_MAX_CONNECTIONS, password: str | None = None
) -> Log:
    """The log on the Redis at ``url`` through ``redis_client``; close it with
    ``log.stores.close()``."""
    return Log(redis_client(url, max_connections, password))


def check_url(url: str) -> None:
    """Raise ValueError if a redis://, rediss:// or unix:// URL has a bad db or option."""
    redis.connection.parse_url(url)
