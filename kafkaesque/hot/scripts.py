"""The Lua scripts, each one atomic operation on the log, registered once and called by SHA.

Every call goes through ``Script``, the one place a script's error reply becomes the core
exception it names (kafkaesque.hot.redis_errors.from_lua).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import cache
from importlib.resources import files
from typing import Any, cast

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError, ResponseError

from kafkaesque.hot.keys import is_cluster
from kafkaesque.hot.outage import REDIS
from kafkaesque.hot.pipelined import CommandHeads, ConnectionClosed, PipelinedConnection, pack
from kafkaesque.hot.redis_errors import from_lua, from_redis
from kafkaesque.hot.tier import HotTier, _translated

SCRIPT_NAMES = (
    "create",
    "append",
    "read",
    "read_many",
    "state",
    "delete",
    "find_time",
    "max_time",
    "configure",
    "closed_pages",
    "mark_archived",
    "close_idle",
    "restore",
    "archive_on",
    "producer_id",
    "delete_records",
    "compact",
    "end_txn",
    "txn_end",
    "txn_save",
    "txn_stage",
    "lead",
    "prefer",
    "register",
    "heartbeat",
    "deregister",
    "brokers_list",
    # A Redis Cluster's steps over several slots (kafkaesque/hot/log_steps.py).
    "create_catalog",
    "create_partition",
    "configure_catalog",
    "configure_partition",
    "delete_catalog",
    "delete_partition",
    "slot_tick",
    "step_done",
    "tick",
    "failover_epoch",
    "archive_barrier",
    "hw_mark",
    "hw_raise",
)


# Helpers only some scripts need, put after common.lua in front of them.
LIBRARIES = {
    "read": ("partition_read",),
    "read_many": ("partition_read",),
    "register": ("brokers",),
    "heartbeat": ("brokers",),
    "deregister": ("brokers",),
    "brokers_list": ("brokers",),
    "configure": ("retime",),
    "configure_partition": ("retime",),
    "end_txn": ("marker",),
    "txn_end": ("marker", "txn_state"),
    "txn_save": ("txn_state",),
    "txn_stage": ("txn_state",),
}


@cache
def source(name: str) -> str:
    """The script's text with the shared helpers (common.lua, then its LIBRARIES) in front
    of it."""
    lua = files("kafkaesque.hot") / "lua"
    parts = ("common", *LIBRARIES.get(name, ()), name)
    return "\n".join((lua / f"{part}.lua").read_text() for part in parts)


def shared_failure(exc: RedisError) -> Exception:
    """A failed call on the shared connection as the core's error. A connection closed
    under it is not reported as an outage yet: the next call connects again, and reports
    one, with its reason (refused, unknown host...), if Redis is away."""
    if isinstance(exc, ConnectionClosed):
        return from_redis(exc) or exc
    return _translated(exc)


class Script:
    """A registered script; its error replies are raised as core exceptions. Calls go
    through ``shared`` (the client's pipelined connection) when there is one, unless a
    ``client`` is named (a connection whose writes a WAIT then covers)."""

    __slots__ = ("_fixed", "_heads", "_ordered", "_script", "_shared")

    def __init__(
        self,
        script: AsyncScript,
        shared: PipelinedConnection | None = None,
        ordered: bool = False,
        fixed_args: int | None = None,
    ) -> None:
        self._script = script
        self._shared = shared
        # Appends: their order on the shared connection is the order they run in, which
        # pipelined produce requests rely on (kafkaesque.hot.pipelined.WRITTEN).
        self._ordered = ordered
        # With ``fixed_args``: a call's keys and first ``fixed_args`` args repeat (per
        # partition), so their packed form is kept and only the other args are packed.
        self._fixed = fixed_args
        self._heads = CommandHeads() if fixed_args is not None else None

    async def __call__(self, keys: list[Any], args: list[Any], client: Any = None) -> Any:
        if client is None and self._shared is not None:
            return await self._shared_call(keys, args)
        try:
            return await self._script(keys=keys, args=args, client=client)
        except ResponseError as exc:
            raise from_lua(exc) from None

    def _packed(self, keys: list[Any], args: list[Any]) -> bytes:
        """The EVALSHA command of a call, packed."""
        sha, fixed, heads = self._script.sha, self._fixed, self._heads
        if heads is None:  # no fixed args
            return pack(("EVALSHA", sha, len(keys), *keys, *args))
        return heads.command(("EVALSHA", sha, len(keys), *keys, *args[:fixed]), args[fixed:])

    async def call_on(
        self, connection: PipelinedConnection, keys: list[Any], args: list[Any]
    ) -> Any:
        """A call on another pipelined connection than the client's shared one."""
        return await self._shared_call(keys, args, connection)

    async def _shared_call(
        self, keys: list[Any], args: list[Any], shared: PipelinedConnection | None = None
    ) -> Any:
        shared = shared or self._shared
        assert shared is not None
        script = self._script
        try:
            try:
                reply = await shared.execute_one(self._packed(keys, args), self._ordered)
            except NoScriptError:  # Redis restarted or its scripts were flushed
                await shared.execute("SCRIPT", "LOAD", script.script)
                reply = await shared.execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except RedisError as exc:
            error = shared_failure(exc)
            if isinstance(error, ResponseError):
                raise from_lua(error) from None
            raise error from exc
        if REDIS.since is not None:
            REDIS.recovered()
        return reply

    async def many(self, redis: Redis, calls: Sequence[tuple[list[Any], list[Any]]]) -> list[Any]:
        """Run the script once per (keys, args), pipelined in one round trip (not a
        transaction: each call is atomic on its own). One result per call: its reply, or
        the exception its error reply stands for (a core exception, e.g. HotTierFull for
        a full Redis); an error reply nothing stands for is raised."""
        if is_cluster(redis):  # redis-py's cluster pipelines send no EVALSHA
            replies = await asyncio.gather(
                *(self._one(keys, args) for keys, args in calls), return_exceptions=True
            )
            for reply in replies:
                if isinstance(reply, BaseException) and not isinstance(reply, ResponseError):
                    raise reply
            replies = list(replies)
        else:
            replies = await self._pipelined(redis, calls)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:  # Redis restarted or its scripts were flushed: none of those ran
            await redis.script_load(self._script.script)
            again = await self._pipelined(redis, [calls[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        results = []
        for reply in replies:
            if isinstance(reply, ResponseError):
                error = from_lua(reply)
                reply = error if error is not reply else from_redis(reply)
                if reply is None:
                    raise error
            results.append(reply)
        return results

    async def _one(self, keys: list[Any], args: list[Any]) -> Any:
        return await self._script(keys=keys, args=args)

    async def _pipelined(
        self, redis: Redis, calls: Sequence[tuple[list[Any], list[Any]]]
    ) -> list[Any]:
        if self._shared is not None:
            packed = b"".join([self._packed(keys, args) for keys, args in calls])
            try:
                return await self._shared.execute_packed(packed, len(calls), self._ordered)
            except RedisError as exc:
                raise shared_failure(exc) from exc
        pipe = redis.pipeline(transaction=False)
        for keys, args in calls:
            pipe.evalsha(self._script.sha, len(keys), *keys, *args)
        return await pipe.execute(raise_on_error=False)


class Scripts:
    """One registered script per operation; redis-py sends EVALSHA and loads on NOSCRIPT."""

    def __init__(self, redis: Redis) -> None:
        # Only a HotTier says PIPELINES_SCRIPTS (and has ``pipelined``).
        pipelines = getattr(redis, "PIPELINES_SCRIPTS", False)
        shared = cast("HotTier", redis).pipelined() if pipelines else None
        # The client's shared connection (kafkaesque.hot.pipelined), None where there is none.
        self.shared = shared
        for name in SCRIPT_NAMES:
            text = source(name)
            script = redis.register_script(text)
            ordered = name == "append"
            if ordered and shared is not None:
                shared.preload(text)
            # append.lua's keys and its first two args (the partition's key prefix and its
            # channel: Appends._append_call) are the same for every append to a partition.
            fixed = 2 if ordered and shared is not None else None
            setattr(self, name, Script(script, shared, ordered=ordered, fixed_args=fixed))

    shared: PipelinedConnection | None
    create: Script
    append: Script
    read: Script
    read_many: Script
    state: Script
    delete: Script
    find_time: Script
    max_time: Script
    configure: Script
    closed_pages: Script
    mark_archived: Script
    close_idle: Script
    restore: Script
    archive_on: Script
    failover_epoch: Script
    archive_barrier: Script
    hw_mark: Script
    hw_raise: Script
    producer_id: Script
    delete_records: Script
    compact: Script
    end_txn: Script
    txn_end: Script
    txn_save: Script
    txn_stage: Script
    lead: Script
    prefer: Script
    register: Script
    heartbeat: Script
    deregister: Script
    brokers_list: Script
    create_catalog: Script
    create_partition: Script
    configure_catalog: Script
    configure_partition: Script
    delete_catalog: Script
    delete_partition: Script
    slot_tick: Script
    step_done: Script
    tick: Script
