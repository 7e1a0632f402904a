"""The hot tier on a Redis Cluster (docs/scale-out.md 2.4): ``redis+cluster://``."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote

from redis.asyncio import BlockingConnectionPool
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    RedisError,
    TryAgainError,
)

from kafkaesque.errors import HotTierUnavailable
from kafkaesque.hot_tier import (
    DEFAULT_MAX_CONNECTIONS,
    POOL_TIMEOUT,
    HotTier,
    _translated,
)
from kafkaesque.outage import REDIS

# -- Redis Cluster (docs/scale-out.md 2.4) --------------------------------------------------

CLUSTER_SCHEME = "redis+cluster://"


class HotTierCluster(RedisCluster):
    """The hot tier as a Redis Cluster: redis-py's cluster client with ``HotTier``'s
    translation of "not now" failures (CLUSTERDOWN, TRYAGAIN or MOVED after redis-py's own
    retries, an unreachable node: HotTierUnavailable). ``for_key`` gives a plain client of
    the node serving a key (durable appends wait on the connection that wrote), and
    ``pubsub`` one of a primary's (a classic PUBLISH reaches every node)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._node_clients: dict[str, HotTier] = {}
        self._subscriptions = 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            result = await super().execute_command(*args, **options)
        except RedisError as exc:
            raise _translated_cluster(exc) from exc
        if REDIS.since is not None:
            REDIS.recovered()
        return result

    async def initialize(self, *args: Any, **kwargs: Any) -> HotTierCluster:
        try:
            await super().initialize(*args, **kwargs)
        except RedisError as exc:
            raise _translated_cluster(exc) from exc
        return self

    def node_client(self, host: str, port: int) -> HotTier:
        """A plain client of one node (kept: one pool per node)."""
        name = f"{host}:{port}"
        client = self._node_clients.get(name)
        if client is None:
            kwargs = {
                k: v
                for k, v in self.get_connection_kwargs().items()
                if k in _NODE_CONNECTION_KWARGS
            }
            pool = BlockingConnectionPool(
                host=host,
                port=port,
                max_connections=DEFAULT_MAX_CONNECTIONS,
                timeout=POOL_TIMEOUT,
                **kwargs,
            )
            client = self._node_clients[name] = HotTier.from_pool(pool)
        return client

    async def for_key(self, key: str) -> HotTier:
        """A plain client of the primary serving ``key``'s slot (redis-py's slot map)."""
        if self._initialize:  # not connected yet: the slot map comes with the first call
            await self.initialize()
        node = self.get_node_from_key(key)
        return self.node_client(node.host, node.port)

    async def refresh_slots(self) -> None:
        """Read the slot map again (after a MOVED or ASK met on a node's own client)."""
        try:
            await self.nodes_manager.initialize()
        except RedisError as exc:
            raise _translated_cluster(exc) from exc

    def pubsub(self, **kwargs: Any) -> Any:  # type: ignore[override]
        """A pub/sub connection to one primary, the next one at each call (a subscriber
        that lost its node subscribes again elsewhere)."""
        # Before the first command the slot map is not read yet: the seed nodes then.
        nodes = self.get_primaries() or list(self.nodes_manager.startup_nodes.values())
        node = nodes[self._subscriptions % len(nodes)]
        self._subscriptions += 1
        return self.node_client(node.host, node.port).pubsub(**kwargs)

    async def aclose(self) -> None:
        for client in self._node_clients.values():
            await client.aclose()
        self._node_clients.clear()
        await super().aclose()


# What a node's own client takes of the cluster client's connection settings.
_NODE_CONNECTION_KWARGS = frozenset(
    {
        "username",
        "password",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "db",
        "client_name",
        "ssl",
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_check_hostname",
    }
)


def _translated_cluster(exc: RedisError) -> Exception:
    """A cluster's "not now" (the slots moving or uncovered, a node away) as the core's
    retriable error; the rest as ``_translated``."""
    if isinstance(exc, ClusterDownError | TryAgainError | MovedError | AskError | ClusterError):
        error = HotTierUnavailable(f"the Redis Cluster is not serving the keys now: {exc}")
        REDIS.failed(error)
        return error
    return _translated(exc)


def cluster_client(
    url: str, max_connections: int = DEFAULT_MAX_CONNECTIONS, password: str | None = None
) -> HotTierCluster:
    """A client of the Redis Cluster ``redis+cluster://h1:p1,h2:p2[/?...]`` (any of the
    nodes will do: the rest are discovered). ``password`` counts only when the URL has
    none; ``rediss+cluster://`` connects over TLS."""
    tls = url.startswith("rediss+cluster://")
    rest = url.split("://", 1)[1]
    netloc, _, tail = rest.partition("/")
    auth, _, hosts = netloc.rpartition("@")
    nodes = []
    for host_port in hosts.split(","):
        host, _, port = host_port.rpartition(":")
        nodes.append(ClusterNode(host or port, int(port) if host else 6379))
    query = parse_qs(tail.partition("?")[2])
    kwargs: dict[str, Any] = {}
    if auth:
        user, _, secret = auth.rpartition(":")
        kwargs["password"] = unquote(secret)
        if user:
            kwargs["username"] = unquote(user)
    elif password is not None:
        kwargs["password"] = password
    if tls:
        kwargs["ssl"] = True
        for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs"):
            if name in query:
                kwargs[name] = query[name][0]
    return HotTierCluster(
        startup_nodes=nodes,
        max_connections=max_connections,
        socket_connect_timeout=5,
        **kwargs,
    )


def is_cluster_url(url: str) -> bool:
    return url.startswith((CLUSTER_SCHEME, "rediss+cluster://"))
