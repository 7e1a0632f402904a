"""The hot tier on a Redis Cluster (docs/scale-out.md 2.4): ``redis+cluster://``.

This module owns the cluster client itself: redis-py's ``RedisCluster`` with the hot
tier's translation of a cluster's "not now" failures into HotTierUnavailable, a node's
death kept from disturbing the others (redis-py's resets taken as a request for a new
slot map, keyless commands and the command table read from a primary that answers),
plain clients of one node (``node_client``, ``for_key``, ``pubsub``), and the parsing of
``redis+cluster://`` URLs. Which primary serves each slot, and the switch hooks run on a
new one after a failover, are kafkaesque/hot/cluster_switches.py's (``PrimarySwitches``,
held as ``switches``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote

from redis._parsers.commands import AsyncCommandsParser
from redis.asyncio import BlockingConnectionPool
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError, RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kafkaesque.errors import HotTierUnavailable
from kafkaesque.hot.cluster_commands import (
    IN_COMMAND,
    ClusterPipelineHere,
    closed_under_command,
    in_command,
    translated_cluster,
)
from kafkaesque.hot.cluster_switches import SWITCHING, ClusterSwitchHook, PrimarySwitches
from kafkaesque.hot.outage import REDIS
from kafkaesque.hot.slots import SLOTS
from kafkaesque.hot.tier import (
    DEFAULT_MAX_CONNECTIONS,
    POOL_OPTIONS,
    POOL_TIMEOUT,
    HotTier,
)

log = logging.getLogger(__name__)

# -- Redis Cluster (docs/scale-out.md 2.4) --------------------------------------------------

CLUSTER_SCHEME = "redis+cluster://"


class _NodePool(BlockingConnectionPool):
    """A node's pool; ``on_failure`` is called when the node cannot be reached (its cluster
    client then reads the slot map again: the node may have failed over)."""

    on_failure: Callable[[], None] | None = None


class _NodeClient(HotTier):
    """A plain client of one node of the cluster (``HotTierCluster.node_client``)."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        with self._noting_failure():
            return await super().execute_command(*args, **options)

    async def initialize(self) -> _NodeClient:
        with self._noting_failure():
            await super().initialize()
        return self

    @contextlib.contextmanager
    def _noting_failure(self) -> Any:
        try:
            yield
        except HotTierUnavailable as exc:
            if isinstance(exc.__cause__, RedisConnectionError | RedisTimeoutError):
                callback = getattr(self.connection_pool, "on_failure", None)
                if callback is not None:
                    callback()
            raise


class _CommandsParser(AsyncCommandsParser):
    """redis-py's command table, read from a primary that answers: redis-py asks only
    the first primary of the slot map (also for COMMAND GETKEYS later), which failed
    every start of a client while that one was away."""

    __slots__ = ("_cluster",)

    def __init__(self, cluster: HotTierCluster) -> None:
        super().__init__()
        self._cluster = cluster

    async def initialize(self, node: ClusterNode | None = None) -> None:
        if self.commands:
            # Read once: redis-py reads it again at every new slot map (after each
            # error of a node away), a large reply to parse for nothing.
            if node is not None and node.name not in self._cluster._away:
                self.node = node
            return
        candidates = [node] if node is not None else []
        candidates += [n for n in self._cluster.get_primaries() if n is not node]
        if not candidates:
            await super().initialize(node)
            return
        failure: Exception | None = None
        for candidate in candidates:
            try:
                await super().initialize(candidate)
            except (RedisConnectionError, RedisTimeoutError) as exc:
                failure = exc
                continue
            if candidate is not node:  # keyless commands go there too
                self._cluster.nodes_manager.default_node = candidate
            return
        assert failure is not None
        raise failure


class HotTierCluster(RedisCluster):
    """The hot tier as a Redis Cluster: redis-py's cluster client with ``HotTier``'s
    translation of "not now" failures (CLUSTERDOWN, TRYAGAIN or MOVED after redis-py's own
    retries, an unreachable node or uncovered slot: HotTierUnavailable). ``for_key`` gives
    a plain client of the node serving a key (durable appends wait on the connection that
    wrote), and ``pubsub`` one of a primary's (a classic PUBLISH reaches every node).

    A node's death must not disturb the others: redis-py's own resets (its ``aclose()``
    after CLUSTERDOWN or a pipeline's connection error) only make the next command read
    the slot map again; they close no connection of a healthy node, no node client.

    Failover (docs/scale-out.md 4.4): the switch hooks (``on_switch``) run on a new
    primary before any command of this client (through redis-py's routing or
    ``for_key``) reaches it there; ``switches`` (kafkaesque/hot/cluster_switches.py) tracks
    which primary they ran for, by slot."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands_parser = _CommandsParser(self)
        self._node_clients: dict[str, _NodeClient] = {}
        self._subscriptions = 0
        self._refresh_wanted = False  # a node client met a node away
        # By slot: the replication id of the primary the hooks last saw there (EpochBump
        # tells a failover it saw from a first look by it).
        self.replids: list[str | None] = [None] * SLOTS
        # Nodes whose last command failed to reach them: keyless commands (INFO, PING)
        # go to another primary meanwhile.
        self._away: set[str] = set()
        self.switches = PrimarySwitches(self)  # the slots' primaries, the switch hooks

    # -- commands ----------------------------------------------------------------------
    async def execute_command(self, *args: Any, **options: Any) -> Any:
        with in_command():
            result = await super().execute_command(*args, **options)
        if REDIS.since is not None:
            REDIS.recovered()
        return result

    async def _execute_command(self, target_node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        # Each attempt of a command (retries after a new slot map too) passes here.
        self.switches.note_new_primaries()
        if target_node.name in self.switches.unconfirmed and not SWITCHING.get():
            await self.switches.confirm(target_node.name)
        try:
            result = await super()._execute_command(target_node, *args, **kwargs)
        except MaxConnectionsError:  # this client's pool is full, the node is fine
            raise
        except (RedisConnectionError, RedisTimeoutError):
            self._away.add(target_node.name)
            raise
        except AttributeError as exc:
            if exc.obj is not None:
                raise
            raise closed_under_command(exc, target_node.name) from exc
        self._away.discard(target_node.name)
        return result

    def get_default_node(self) -> Any:
        """redis-py's node for keyless commands, unless it is away: then another primary
        (redis-py would pick the same dead one again from a slot map that still names
        it, failing INFO or PING while a shard is lost)."""
        node = super().get_default_node()
        if node is not None and node.name in self._away:
            for other in self.get_primaries():
                if other.name not in self._away:
                    self.nodes_manager.default_node = other
                    return other
        return node

    async def script_load(self, script: Any) -> Any:
        """SCRIPT LOAD on every primary, as redis-py does (after NOSCRIPT), except that a
        primary away (its shard lost) does not fail it: a script runs on one key's node
        only, so the others' partitions go on."""
        nodes = self.get_primaries()
        if not nodes:  # the slot map is not read yet
            return await self.execute_command("SCRIPT LOAD", script)
        replies = await asyncio.gather(
            *(self.execute_command("SCRIPT LOAD", script, target_nodes=node) for node in nodes),
            return_exceptions=True,
        )
        for reply in replies:
            if not isinstance(reply, BaseException):
                return reply
        raise replies[0]

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> Any:
        if shard_hint:
            raise RedisClusterException("shard_hint is deprecated in cluster mode")
        return ClusterPipelineHere(self, transaction)

    async def initialize(self, *args: Any, **kwargs: Any) -> HotTierCluster:
        try:
            await super().initialize(*args, **kwargs)
        except (RedisError, RedisClusterException) as exc:
            error = translated_cluster(exc)
            if error is exc:
                raise
            raise error from exc
        return self

    # -- one node's own clients -----------------------------------------------------------
    def node_client(self, host: str, port: int | str) -> HotTier:
        """A plain client of one node (kept: one pool per node)."""
        name = f"{host}:{port}"
        client = self._node_clients.get(name)
        if client is None:
            kwargs: dict[str, Any] = {
                k: v
                for k, v in self.get_connection_kwargs().items()
                if k in _NODE_CONNECTION_KWARGS
            }
            pool = _NodePool(
                host=host,
                port=port,
                max_connections=DEFAULT_MAX_CONNECTIONS,
                timeout=POOL_TIMEOUT,
                **POOL_OPTIONS,
                **kwargs,
            )
            pool.on_failure = self._node_away
            client = self._node_clients[name] = _NodeClient.from_pool(pool)
        return client

    def _node_away(self) -> None:
        self._refresh_wanted = True

    def slot_map_outdated(self) -> None:
        """A node answered MOVED or ASK for a slot the map gives it: the next command
        reads the slot map again first (as after redis-py's own resets)."""
        self._initialize = True

    async def for_key(self, key: str) -> HotTier:
        """A plain client of the primary serving ``key``'s slot (redis-py's slot map, read
        again when a node client found its node away: it may have failed over), once the
        switch hooks ran there."""
        if self._initialize:  # not connected yet: the slot map comes with the first call
            await self.initialize()
        if self._refresh_wanted:
            self._refresh_wanted = False
            await self.refresh_slots()
        try:
            node = self.get_node_from_key(key)
        except RedisClusterException as exc:  # its slot is not served now
            raise translated_cluster(exc) from exc
        assert node is not None  # None only when asked for a replica
        self.switches.note_new_primaries()
        if node.name in self.switches.unconfirmed:
            await self.switches.confirm(node.name)
        return self.node_client(node.host, node.port)

    async def refresh_slots(self) -> None:
        """Read the slot map again (after a MOVED or ASK met on a node's own client, or a
        node away)."""
        try:
            await self.nodes_manager.initialize()
        except (RedisError, RedisClusterException) as exc:
            error = translated_cluster(exc)
            if error is exc:
                raise
            raise error from exc

    def pubsub(self, **kwargs: Any) -> Any:  # type: ignore[override]
        """A pub/sub connection to one primary, the next one at each call (a subscriber
        that lost its node subscribes again elsewhere)."""
        # Before the first command the slot map is not read yet: the seed nodes then.
        nodes = self.get_primaries() or list(self.nodes_manager.startup_nodes.values())
        node = nodes[self._subscriptions % len(nodes)]
        self._subscriptions += 1
        return self.node_client(node.host, node.port).pubsub(**kwargs)

    def on_switch(self, hook: ClusterSwitchHook) -> None:
        """Run ``hook`` on every node that becomes the primary of slots (the first time the
        slot map is read, then at each failover), before this client's commands reach it
        there (the Sentinel client's ``on_switch`` too: kafkaesque/hot/log.py adds EpochBump)."""
        self.switches.add(hook)

    async def check_primaries(self, timeout: float = 5.0) -> int:
        """The hooks run on every primary for all its slots (``PrimarySwitches``'s, for
        kafkaesque/hot/failover.py ``FailoverWatch``); the partitions given a new epoch."""
        return await self.switches.check_primaries(timeout)

    # -- closing -------------------------------------------------------------------------
    async def aclose(self) -> None:
        if IN_COMMAND.get():
            # redis-py resetting after a node failed: the next command reads the slot map
            # again. Closing every connection here (redis-py's way) would cut the
            # commands in flight on the healthy nodes and the node clients in use.
            self._initialize = True
            return
        clients = list(self._node_clients.values())  # node_client may add one meanwhile
        self._node_clients.clear()
        for client in clients:
            with contextlib.suppress(Exception):
                await client.aclose()
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
        # A shard wholly away (primary and replicas) leaves its slots uncovered: the
        # others go on (CLUSTER SLOTS still names it until the nodes forget it).
        require_full_coverage=False,
        **kwargs,
    )


def is_cluster_url(url: str) -> bool:
    return url.startswith((CLUSTER_SCHEME, "rediss+cluster://"))
