"""The cluster id: one per Redis, reported to Kafka clients and recorded by its archive.

A Redis and an archive belong together when they carry the same id; the archive side of the
check is storage_pg.recovery.bind_cluster.
"""

from __future__ import annotations

import base64
import uuid

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from kafkaesque.hot.keys import Keys


def cluster_key(namespace: str, cluster: bool = False) -> str:
    return Keys(namespace, cluster).cluster_id


async def cluster_id(redis: Redis, namespace: str) -> str:
    """The Redis' cluster id, created on first use (22 characters, as Kafka's), shared by
    every broker process and command on it."""
    key = Keys.of(redis, namespace).cluster_id
    fresh = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    # One command (SET NX GET, Redis 7+): a flush between a SET and a GET would leave
    # nothing to read, and a transactional pipeline on a cluster client re-initialising
    # after a node's death failed inside redis-py ("bound to a different event loop").
    try:
        value = await redis.set(key, fresh, nx=True, get=True)
    except ResponseError:  # Redis 6.2: NX and GET not together; one MULTI instead
        pipe = redis.pipeline(transaction=True)
        pipe.set(key, fresh, nx=True)
        pipe.get(key)
        _, value = await pipe.execute()
    if value is None:  # ours was set
        return fresh
    return value.decode() if isinstance(value, bytes) else str(value)
