"""How a command of the Redis Cluster client runs and fails (kafkaesque/hot/tier_cluster.py
``HotTierCluster`` is the client): a cluster's "not now" failures as the core's retriable
error, redis-py's resets from inside a command told from the owner closing the client
(``IN_COMMAND``), and pipelines whose transactions stay in the caller's event loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from redis.asyncio.cluster import (
    AbstractStrategy,
    ClusterPipeline,
    RedisCluster,
    TransactionStrategy,
)
from redis.event import EventDispatcherInterface
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    RedisClusterException,
    RedisError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from kafkaesque.errors import HotTierUnavailable
from kafkaesque.hot.outage import REDIS
from kafkaesque.hot.tier import _translated

# Set while a command or pipeline of the client runs: an ``aclose()`` redis-py calls from
# there (after CLUSTERDOWN, a MOVED storm, a pipeline's connection error) is its way of
# asking for a new slot map, not the owner closing the client.
IN_COMMAND: ContextVar[bool] = ContextVar("kafkaesque_cluster_command", default=False)


def closed_under_command(exc: AttributeError, node: str) -> Exception:
    """redis-py's failure when another task closed the connection a command had taken
    (a slot map refresh drops a node's connections, in use or not): its stream is None.
    Before the command was written (``writelines``) it is a connection error that
    redis-py retries; after, the command may have run, so the caller gets a retriable
    "not now" and decides (an idempotent producer's retry is deduplicated)."""
    if exc.name in ("writelines", "drain"):
        return RedisConnectionError(f"{node}: connection closed before the command was sent")
    error = HotTierUnavailable(f"{node}: connection closed under a command")
    REDIS.failed(error)
    return error


@contextlib.contextmanager
def in_command() -> Iterator[None]:
    """A command of the client's own (``aclose`` inside it is redis-py resetting after a
    node failed), its failures raised as the core's errors."""
    token = IN_COMMAND.set(True)
    try:
        yield
    except (RedisError, RedisClusterException) as exc:
        error = translated_cluster(exc)
        if error is exc:
            raise
        raise error from exc
    finally:
        IN_COMMAND.reset(token)


def translated_cluster(exc: Exception) -> Exception:
    """A cluster's "not now" (the slots moving or uncovered, a node away) as the core's
    retriable error; the rest as kafkaesque/hot/tier.py's ``_translated``."""
    if isinstance(exc, ClusterDownError | TryAgainError | MovedError | AskError | ClusterError):
        error = HotTierUnavailable(f"the Redis Cluster is not serving the keys now: {exc}")
        REDIS.failed(error)
        return error
    if isinstance(exc, RedisClusterException):
        # An uncovered slot, or no node answering the slot map; other ones (keys of
        # several slots in one command) are mistakes, raised as they are.
        text = str(exc)
        if (
            isinstance(exc, SlotNotCoveredError)
            or "not covered" in text
            or "cannot be connected" in text
        ):
            error = HotTierUnavailable(f"the Redis Cluster is not serving the keys now: {text}")
            REDIS.failed(error)
            return error
        return exc
    if isinstance(exc, RedisError):
        return _translated(exc)
    return exc


class TransactionInThisLoop(TransactionStrategy):
    """redis-py's transaction strategy without its thread. redis-py runs each command
    queued in a cluster transaction in a new thread through ``asyncio.run`` (its queueing
    is synchronous, its slot lookup and slot map refresh are not); right after a reset
    that other event loop read the slot map, and the connections it opened or took were
    left to the client's own loop, where they failed the next commands ("Event loop is
    closed", or a lock bound to another loop). Here a queued command is only queued, its
    slot and any refresh of the slot map come at ``execute``, and a command that runs at
    once (WATCH, or any while watching) is a coroutine of the caller's loop."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if (self._watching or args[0] in self.IMMEDIATE_EXECUTE_COMMANDS) and not (
            self._explicit_transaction
        ):
            return self._at_once(*args, **kwargs)
        return AbstractStrategy.execute_command(self, *args, **kwargs)

    async def _at_once(self, *args: Any, **kwargs: Any) -> Any:
        # Past any slot map refresh and the slot's checks, it returns the coroutine that
        # sends the command.
        return await (await self._execute_command(*args, **kwargs))

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> Any:
        client = self._pipe.cluster_client
        if client._initialize:
            await client.initialize()
        for command in self._command_queue:
            if command.args[0] not in self.NO_SLOTS_COMMANDS:
                self._pipeline_slots.add(await client._determine_slot(*command.args))
        return await super().execute(raise_on_error, allow_redirections)


class ClusterPipelineHere(ClusterPipeline):
    """redis-py's cluster pipeline with the client's translation of failures, its resets
    of the client (``aclose`` when a node fails) taken as such, and transactions in the
    caller's event loop (``TransactionInThisLoop``)."""

    # A declaration only: redis-py's CommandsProtocol, a base of ClusterPipeline, declares
    # it without a value, which the checker takes as abstract (a pipeline never sets it).
    _event_dispatcher: EventDispatcherInterface

    def __init__(self, client: RedisCluster, transaction: bool | None = None) -> None:
        super().__init__(client, transaction)
        if transaction:
            self._execution_strategy = TransactionInThisLoop(self)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        with in_command():
            return await super().execute(*args, **kwargs)
