"""The hot tier through Redis Sentinel (docs/scale-out.md section 4): ``redis+sentinel://``."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import (
    RedisError,
    ResponseError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError

from kafkaesque.hot.redis_errors import describe_redis_error
from kafkaesque.hot.tier import (
    DEFAULT_MAX_CONNECTIONS,
    POOL_OPTIONS,
    POOL_TIMEOUT,
    HotTier,
    _translated,
)

SENTINEL_SCHEME = "redis+sentinel"


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
# again whenever the primary changes (kafkaesque.hot.failover bumps the leader epochs).
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
            return address
        async with self._switching:  # one switch at a time; others wait for it
            if self.master_address != address:
                await self._run_switch_hooks(address)
                self.master_address = address
                # Idle connections to the old primary go; in-use ones when released.
                await self.disconnect(inuse_connections=False)
        return address

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

    PIPELINES_SCRIPTS = False  # each connection asks the sentinels for the primary

    @property
    def sentinels(self) -> _Sentinels:
        return self.connection_pool.sentinel_manager  # type: ignore[attr-defined]

    @property
    def service(self) -> str:
        return self.connection_pool.service_name  # type: ignore[attr-defined]

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
        **POOL_OPTIONS,
        **extra,
    )
    return SentinelHotTier.from_pool(pool)
