"""The Redis client every command and the broker use."""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis

# Connections the broker may open to Redis: enough that requests rarely queue for one,
# few enough that thousands of clients do not exhaust Redis' maxclients (10,000).
DEFAULT_MAX_CONNECTIONS = 128
# How long a request waits for a free connection before it fails (as a Kafka error).
POOL_TIMEOUT = 30.0


def redis_client(url: str, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> Redis:
    """A client whose pool waits for a free connection when all ``max_connections`` are
    busy. redis-py's default pool raises MaxConnectionsError at its limit instead, which
    failed every request beyond the 100th in flight."""
    pool = BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=POOL_TIMEOUT, socket_connect_timeout=5
    )
    return Redis.from_pool(pool)
