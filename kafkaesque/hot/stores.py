"""The hot store's stores beside the log: what the broker, the archive and the commands
keep in Redis, each built once on the log's client, keys and namespace (``Log.stores``).

Callers outside kafkaesque/hot/ ask these for what they need and never hold a Redis
client or build a key: ACLs, client quotas, SCRAM credentials, groups' committed offsets,
share groups, dynamic broker configs, the cluster id, the memory guard, the durability probe,
notifications. Which engine (one server, Sentinel, Cluster) is behind them was chosen
once, when the client was made (kafkaesque/hot/connect.py).
"""

from __future__ import annotations

from functools import cached_property

import msgpack
from redis.asyncio import Redis

from kafkaesque.hot.acl_store import AclStore
from kafkaesque.hot.cluster_id import cluster_id
from kafkaesque.hot.credentials import CredentialStore
from kafkaesque.hot.durability import Durability, probe
from kafkaesque.hot.group_offsets import OffsetStore
from kafkaesque.hot.keys import Keys
from kafkaesque.hot.memory import MemoryGuard, MemoryUse, ReleaseArchived, memory_use
from kafkaesque.hot.notify import Notifier
from kafkaesque.hot.quota_store import QuotaStore
from kafkaesque.hot.share_store import ShareStore
from kafkaesque.hot.tier_cluster import HotTierCluster
from kafkaesque.hot.tier_sentinel import SentinelHotTier


class BrokerConfigStore:
    """Dynamic broker configs (``Keys.broker_configs``): one msgpack map per broker id,
    the cluster-wide default under the empty field."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.key = keys.broker_configs

    async def read(self) -> tuple[dict[str, str], dict[int, dict[str, str]]]:
        """The cluster-wide default's configs, and each broker's own."""
        cluster: dict[str, str] = {}
        per_broker: dict[int, dict[str, str]] = {}
        for field, value in (await self.redis.hgetall(self.key)).items():
            configs = msgpack.unpackb(value)
            if field in (b"", ""):
                cluster = configs
            else:
                per_broker[int(field)] = configs
        return cluster, per_broker

    async def write(self, node: int | None, configs: dict[str, str]) -> None:
        """Set one broker's configs (``node`` None: the cluster default); empty removes them."""
        field = "" if node is None else str(node)
        if configs:
            await self.redis.hset(self.key, field, msgpack.packb(configs))
        else:
            await self.redis.hdel(self.key, field)


class Stores:
    """Every store of one hot store but the log itself (see the module docstring)."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self._redis = redis
        self._keys = keys

    @cached_property
    def acls(self) -> AclStore:
        return AclStore(self._redis, self._keys.ns)

    @cached_property
    def quotas(self) -> QuotaStore:
        return QuotaStore(self._redis, self._keys.ns)

    @cached_property
    def credentials(self) -> CredentialStore:
        return CredentialStore(self._redis, self._keys.ns)

    @cached_property
    def offsets(self) -> OffsetStore:
        return OffsetStore(self._redis, self._keys)

    @cached_property
    def share(self) -> ShareStore:
        """Share groups (KIP-932) and their share-partitions' records."""
        return ShareStore(self._redis, self._keys)

    @cached_property
    def broker_configs(self) -> BrokerConfigStore:
        return BrokerConfigStore(self._redis, self._keys)

    def notifier(self, prefix: str) -> Notifier:
        """Waiters woken by local events and by Redis pub/sub on channels named ``prefix``..."""
        return Notifier(self._redis, prefix)

    def memory_guard(self, release: ReleaseArchived | None = None) -> MemoryGuard:
        return MemoryGuard(self._redis, release)

    async def memory_use(self) -> MemoryUse:
        return await memory_use(self._redis)

    async def cluster_id(self) -> str:
        """The cluster id, created on first use."""
        return await cluster_id(self._redis, self._keys.ns)

    async def set_cluster_id(self, value: str) -> None:
        """Take an archive's cluster id (Redis lost its data, or is new)."""
        await self._redis.set(self._keys.cluster_id, value)

    async def durability(self, min_insync_replicas: int) -> tuple[Durability, str]:
        """What acks=all can wait for here, and the line saying what it survives."""
        return await probe(self._redis, min_insync_replicas)

    async def ping(self) -> None:
        await self._redis.ping()

    @property
    def follows_failovers(self) -> bool:
        """Whether a primary can change under us (Sentinel, or a Cluster's shard), so new
        leader epochs must follow each failover."""
        return isinstance(self._redis, SentinelHotTier | HotTierCluster)

    async def close(self) -> None:
        """Close the client's connections."""
        await self._redis.aclose()
