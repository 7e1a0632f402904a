"""The hot tier's client: a Redis client whose "not now" failures (unreachable, loading,
read-only, full) are the core's retriable errors, logged once per outage. Its Redis
Cluster and Sentinel forms are in hot_tier_cluster.py and hot_tier_sentinel.py;
kafkaesque.hot.connect picks one from ``--redis-url``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import (
    RedisError,
)
from redis.maint_notifications import MaintNotificationsConfig

from kafkaesque.errors import HotTierFull
from kafkaesque.hot.outage import REDIS
from kafkaesque.hot.pipelined import PipelinedConnection
from kafkaesque.hot.redis_errors import from_redis

# Connections the broker may open to Redis: enough that requests rarely queue for one,
# few enough that thousands of clients do not exhaust Redis' maxclients (10,000).
DEFAULT_MAX_CONNECTIONS = 128
# How long a request waits for a free connection before it fails (as a Kafka error).
POOL_TIMEOUT = 30.0
# Every pool of the hot tier is built with these options. With redis-py's default
# maintenance notifications ("auto", on RESP3) a pool skips its check of an idle
# connection when handing it out, so after Redis restarted each idle connection failed
# its next command ("Connection closed by server"): a Kafka error for a request long after
# the outage. Maintenance notifications are Redis Enterprise's; no server here sends them.
POOL_OPTIONS: dict[str, Any] = {
    "maint_notifications_config": MaintNotificationsConfig(enabled=False)
}


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
    can answer it with a Kafka error code, and the outage is logged once, not per call.

    Script calls share one pipelined connection (``pipelined``, kafkaesque.hot.pipelined);
    not through Sentinel, whose connections must each find the primary after a failover."""

    PIPELINES_SCRIPTS = True
    _pipelined: PipelinedConnection | None = None

    if TYPE_CHECKING:
        # redis-py's from_pool makes an instance of ``cls``; its annotation says Redis.
        @classmethod
        def from_pool(cls, connection_pool: ConnectionPool) -> Self: ...

    _durable: PipelinedConnection | None = None

    def pipelined(self) -> PipelinedConnection:
        """The connection script calls share (made on first use)."""
        if self._pipelined is None:
            self._pipelined = PipelinedConnection(self)
        return self._pipelined

    def durable_pipelined(self) -> PipelinedConnection:
        """A second shared connection, for acks=all's appends and their WAITAOF, which
        block it (kafkaesque/hot/durability.py ``DurableAppends``)."""
        if self._durable is None:
            self._durable = PipelinedConnection(self)
        return self._durable

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        for connection in (self._pipelined, self._durable):
            if connection is not None:
                await connection.aclose()
        await super().aclose(close_connection_pool)

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
