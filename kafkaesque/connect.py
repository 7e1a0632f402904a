"""The Redis client every command and the broker use.

``--redis-url`` is a plain Redis (``redis://``, ``rediss://``, ``unix://``) or a primary
found through Sentinel: ``redis+sentinel://h1:26379,h2:26379/SERVICE[/db]`` with the
options ``password`` (of the data nodes) and ``sentinel_password`` (of the sentinels).
Through Sentinel the client asks for the primary on every new connection, and a READONLY
reply from a demoted primary drops the connection, so commands reach the new primary
after a failover (docs/scale-out.md, section 4).
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kafkaesque.errors import HotTierFull, HotTierUnavailable, describe_redis_error, from_redis
from kafkaesque.outage import REDIS

SENTINEL_SCHEME = "redis+sentinel"

# Connections the broker may open to Redis: enough that requests rarely queue for one,
# few enough that thousands of clients do not exhaust Redis' maxclients (10,000).
DEFAULT_MAX_CONNECTIONS = 128
# How long a request waits for a free connection before it fails (as a Kafka error).
POOL_TIMEOUT = 30.0


def _translated(exc: RedisError) -> Exception:
    """Redis saying "not now" as the core's retriable error, noted in the outage log."""
    error = from_redis(exc)
    if error is None:
        return exc
    if not isinstance(error, HotTierFull):  # a full Redis still answers: not an outage
        REDIS.failed(error)
    return error


class HotTierPipeline(Pipeline):
    """A pipeline whose failures are translated like ``HotTier``'s commands."""

    async def immediate_execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return await super().immediate_execute_command(*args, **options)
        except RedisError as exc:
            raise _translated(exc) from exc

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return await super().execute(raise_on_error)
        except RedisError as exc:
            raise _translated(exc) from exc


class HotTier(Redis):
    """The client of the hot tier: a Redis failure that means "not now" (unreachable,
    loading, read-only, full) is raised as the core's retriable error, so every request
    can answer it with a Kafka error code, and the outage is logged once, not per call."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            result = await super().execute_command(*args, **options)
        except RedisError as exc:
            raise _translated(exc) from exc
        if REDIS.since is not None:
            REDIS.recovered()
        return result

    async def initialize(self) -> HotTier:
        """A client bound to one connection (``client()``) takes it here."""
        try:
            return await super().initialize()
        except RedisError as exc:
            raise _translated(exc) from exc

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        return HotTierPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )


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
        **extra,
    )
    return HotTier.from_pool(pool)


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


# -- Sentinel --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SentinelUrl:
    """A parsed ``redis+sentinel://`` URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    password: str | None = None
    sentinel_password: str | None = None

    def __repr__(self) -> str:  # never a password
        where = ",".join(f"{host}:{port}" for host, port in self.sentinels)
        return f"SentinelUrl({where}/{self.service}/{self.db})"


SENTINEL_FORM = "redis+sentinel://host:port[,host:port...]/SERVICE[/db]"
_SENTINEL_OPTIONS = ("password", "sentinel_password")


def parse_sentinel_url(url: str) -> SentinelUrl:
    """The sentinels, service, db and passwords of ``url``; ValueError (a message without
    the passwords) when it is not of the form ``SENTINEL_FORM``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != SENTINEL_SCHEME:
        raise ValueError(f"expected {SENTINEL_FORM}")
    netloc = parts.netloc.rpartition("@")[2]  # user info: the passwords go in the options
    sentinels = []
    for item in netloc.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep:
            host, port = item.strip(), "26379"
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected {SENTINEL_FORM}: bad sentinel address {item!r}")
        sentinels.append((host, int(port)))
    path = [urllib.parse.unquote(p) for p in parts.path.split("/") if p]
    if not path:
        raise ValueError(f"expected {SENTINEL_FORM}: no SERVICE (the name Sentinel monitors)")
    if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ValueError(f"expected {SENTINEL_FORM}: bad path after the service")
    options = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(options) - set(_SENTINEL_OPTIONS))
    if unknown:
        raise ValueError(
            f"unknown option {unknown[0]!r} in the sentinel URL (known: "
            + ", ".join(_SENTINEL_OPTIONS)
            + ")"
        )
    values = {name: options[name][-1] for name in options}
    if parts.password is not None and "password" not in values:
        values["password"] = urllib.parse.unquote(parts.password)
    return SentinelUrl(
        tuple(sentinels),
        path[0],
        int(path[1]) if len(path) == 2 else 0,
        values.get("password") or None,
        values.get("sentinel_password") or None,
    )


class _Sentinels(Sentinel):
    """redis-py's Sentinel manager, asking GET-MASTER-ADDR-BY-NAME (which names the
    promoted replica as soon as it is promoted; SENTINEL MASTERS, redis-py's question,
    names the old primary until the other replicas are reconfigured), and whose "no
    primary" error says in one line which sentinel answered what."""

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        reasons = []
        for number, sentinel in enumerate(self.sentinels):
            where = _address(sentinel)
            try:
                address = await sentinel.execute_command(
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", service_name
                )
            except (RedisConnectionError, RedisTimeoutError) as exc:
                reasons.append(describe_redis_error(exc))
                continue
            except ResponseError as exc:  # e.g. a Redis that is not a sentinel
                reasons.append(f"{where} ({str(exc).rstrip('.')})")
                continue
            if not address:
                reasons.append(f"{where} (monitors no {service_name!r})")
                continue
            self.sentinels[0], self.sentinels[number] = sentinel, self.sentinels[0]
            host, port = address
            return host.decode() if isinstance(host, bytes) else host, int(port)
        raise MasterNotFoundError(
            f"no sentinel gives a primary for {service_name!r}: " + "; ".join(reasons)
        )


def _address(client: Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"{kwargs.get('host')}:{kwargs.get('port')}"


# Called with a client of the primary before the pool's first command reaches it, and
# again whenever the primary changes (kafkaesque.failover bumps the leader epochs).
SwitchHook = Callable[[Redis], Awaitable[object]]


class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Sentinel's pool (connections to the primary it names) that waits for a free
    connection at its limit, as ``redis_client``'s does. Before its first connection to a
    primary (the first, and each one a failover brings), its ``switch_hooks`` run on a
    connection of their own: the new leader epochs are in place before the first append
    there (else records appended in between would carry the old epoch at offsets the old
    primary had given to records now lost)."""

    def __init__(self, service_name: str, sentinel_manager: Sentinel, **kwargs: Any) -> None:
        super().__init__(service_name, sentinel_manager, **kwargs)
        self.switch_hooks: list[SwitchHook] = []
        self._switching = asyncio.Lock()

    async def get_master_address(self) -> tuple[str, int]:
        address = await self.sentinel_manager.discover_master(self.service_name)
        if self.master_address == address:
            return address  # type: ignore[no-any-return]
        async with self._switching:  # one switch at a time; others wait for it
            if self.master_address != address:
                await self._run_switch_hooks(address)
                self.master_address = address
                # Idle connections to the old primary go; in-use ones when released.
                await self.disconnect(inuse_connections=False)
        return address  # type: ignore[no-any-return]

    async def _run_switch_hooks(self, address: tuple[str, int]) -> None:
        if not self.switch_hooks:
            return
        options = {
            name: self.connection_kwargs[name]
            for name in ("db", "username", "password", "socket_connect_timeout")
            if name in self.connection_kwargs
        }
        direct = Redis(host=address[0], port=address[1], socket_timeout=30, **options)
        try:
            for hook in self.switch_hooks:
                await hook(direct)
        except Exception as exc:  # the connection that wanted the primary fails: retried
            raise RedisConnectionError(
                f"{address[0]}:{address[1]} is the new primary, not ready yet: {exc}"
            ) from exc
        finally:
            await direct.aclose()


class SentinelHotTier(HotTier):
    """The hot tier's client when the primary is found through Sentinel (its pool knows
    the sentinels and the service; ``client()`` copies share it)."""

    @property
    def sentinels(self) -> _Sentinels:
        return self.connection_pool.sentinel_manager  # type: ignore[attr-defined,no-any-return]

    @property
    def service(self) -> str:
        return self.connection_pool.service_name  # type: ignore[attr-defined,no-any-return]

    async def primary_address(self) -> tuple[str, int]:
        """The primary the sentinels name now; when it changed, the pool's idle
        connections to the old one are closed (in-use ones are when released), so the
        next commands go to the new one even while the old one still answers."""
        try:
            return await self.connection_pool.get_master_address()  # type: ignore[attr-defined]
        except RedisError as exc:
            raise _translated(exc) from exc

    def on_switch(self, hook: SwitchHook) -> None:
        """Run ``hook`` with a client of the new primary at each failover, before this
        client's commands reach it (see BlockingSentinelPool)."""
        hooks = self.connection_pool.switch_hooks  # type: ignore[attr-defined]
        if hook not in hooks:
            hooks.append(hook)

    async def switches(self) -> AsyncIterator[tuple[str, int]]:
        """The new primary's address at each failover of the service, as a sentinel
        announces it (``+switch-master``); ends when that sentinel's connection breaks."""
        for sentinel in self.sentinels.sentinels:
            pubsub = sentinel.pubsub()
            try:
                await pubsub.subscribe("+switch-master")
            except (RedisConnectionError, RedisTimeoutError):
                await pubsub.aclose()
                continue
            try:
                async for message in pubsub.listen():
                    if message["type"] != "message":
                        continue
                    name, _old, _old_port, host, port = message["data"].decode().split()
                    if name == self.service:
                        yield host, int(port)
            finally:
                await pubsub.aclose()
            return
        raise RedisConnectionError(f"no sentinel of {self.service!r} is reachable")

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        owner = self.auto_close_connection_pool if close_connection_pool is None else True
        await super().aclose(close_connection_pool)
        if owner and close_connection_pool is not False:
            await self.sentinels.aclose()


def sentinel_client(
    url: SentinelUrl, max_connections: int = DEFAULT_MAX_CONNECTIONS, password: str | None = None
) -> SentinelHotTier:
    """A client of the primary the sentinels of ``url`` name, following its failovers;
    ``password`` counts only when the URL has none."""
    timeouts = {"socket_connect_timeout": 5}
    sentinel_kwargs: dict[str, Any] = dict(timeouts, socket_timeout=5)
    if url.sentinel_password is not None:
        sentinel_kwargs["password"] = url.sentinel_password
    sentinel = _Sentinels(list(url.sentinels), sentinel_kwargs=sentinel_kwargs)
    data_password = url.password if url.password is not None else password
    extra = {} if data_password is None else {"password": data_password}
    pool = BlockingSentinelPool(
        url.service,
        sentinel,
        is_master=True,
        max_connections=max_connections,
        timeout=POOL_TIMEOUT,
        db=url.db,
        **timeouts,
        **extra,
    )
    return SentinelHotTier.from_pool(pool)
