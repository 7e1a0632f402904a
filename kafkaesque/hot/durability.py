"""What acks=all waits for after an append, and what this Redis can promise.

acks=1 answers once Redis has applied the append: it survives a broker crash, and (AOF on,
written before Redis replies) a Redis crash. Whether it survives a power loss depends on
the server's appendfsync: under ``always`` (the embedded server's) Redis answers a write
only once it is fsynced, so every acknowledged append does. Under ``everysec`` acks=all
also waits, on the connection that appended, for WAITAOF; Valkey answers it before the
fsync is done there, so the start-up line says that a power loss may still take the last
second. When replicas are required, acks=all is refused while too few are in sync
(append.lua) and waits for WAIT (that many replicas have it). Where a server cannot do
something, acks=all says at start-up what it cannot promise instead of pretending.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from kafkaesque.errors import NotDurable
from kafkaesque.hot.pipelined import WRITTEN, PipelinedConnection
from kafkaesque.hot.scripts import Script, shared_failure

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms, used when a request gives none


@dataclass(frozen=True, slots=True)
class Durability:
    """Wait for the local AOF fsync (``fsync``) and for ``replicas`` Redis replicas."""

    fsync: bool = False
    replicas: int = 0

    @property
    def waits(self) -> bool:
        return self.fsync or self.replicas > 0

    async def wait(self, connection: Any, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        """Wait for the waits on the ``connection`` that appended (they cover its own
        writes only); raise NotDurable unless all were met. Sent after the append's
        reply, not pipelined with it: a WAITAOF that arrives with the write under
        appendfsync everysec waits for the next cron tick (100 ms), one sent after it
        gets an fsync at once (measured: 0.5 ms)."""
        await self.wait_with(connection.execute_command, timeout_ms)

    async def wait_with(
        self, execute: Callable[..., Awaitable[Any]], timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> None:
        """``wait``, its commands sent by ``execute`` (a connection's command call)."""
        timeout = max(1, timeout_ms)  # 0 would mean "wait forever"
        try:
            if self.fsync:
                local, _ = await execute("WAITAOF", 1, 0, timeout)
                if int(local) < 1:
                    raise NotDurable("the append was not fsynced to Redis' AOF in time")
            if self.replicas:
                acknowledged = int(await execute("WAIT", self.replicas, timeout))
                if acknowledged < self.replicas:
                    raise NotDurable(
                        f"{acknowledged} of {self.replicas} Redis replicas have the append"
                    )
        except ResponseError as exc:  # e.g. AOF switched off since start-up
            raise NotDurable(f"cannot wait for the append to be durable: {exc}") from None


class DurableAppends:
    """acks=all's appends on one Redis, with one wait (WAITAOF, WAIT) for every append
    whose reply came before it, instead of one per append on a pooled connection.

    The appends go through their own pipelined connection (``connection``: the waits
    cover only its writes, and block it while they run). A wait is sent only once every
    append written before it has been answered: a WAITAOF that Redis reads together with
    a write waits for the next cron tick (100 ms, ``Durability.wait``). So while a wait is
    due, new appends are held back until it is written; written after it, they run once it
    returns and the next wait covers them. Each caller waits for the first wait sent after
    its own append's reply, up to its own timeout."""

    def __init__(self, connection: PipelinedConnection, append: Script) -> None:
        self.connection = connection
        self.append_script = append
        self.in_flight = 0  # appends written, not yet answered
        self.due: asyncio.Future[None] | None = None  # the next wait's outcome
        self.due_timeout_ms = 0  # the longest timeout of its callers
        self.due_durability: Durability | None = None
        self.waiting = False  # a wait is in flight
        self.gate: asyncio.Future[None] | None = None  # appends hold while set
        self.loop: asyncio.AbstractEventLoop | None = None

    async def append(
        self, durability: Durability, timeout_ms: int, keys: list[Any], args: list[Any]
    ) -> Any:
        """The append script's reply, once a wait sent after it was met; NotDurable when
        one was not, or not within ``timeout_ms`` (the append stays)."""
        loop = asyncio.get_running_loop()
        if loop is not self.loop:  # a new event loop (tests): nothing of the old one holds
            self.in_flight, self.due, self.waiting, self.gate = 0, None, False, None
            self.loop = loop
        while self.gate is not None:
            await asyncio.shield(self.gate)
        self.in_flight += 1
        try:
            reply = await self.append_script.call_on(self.connection, keys, args)
        finally:
            self.in_flight -= 1
            self._maybe_send()
        if self.due is None:
            self.due = asyncio.get_running_loop().create_future()
            self.due.add_done_callback(_retrieved)  # a caller may have timed out
        self.due_timeout_ms = max(self.due_timeout_ms, timeout_ms)
        # One server, one promise: the durability is the broker's, the same for all.
        self.due_durability = durability
        due = self.due
        self._maybe_send()
        try:
            # The wait's own commands time out first, saying why (each one up to the
            # timeout, as they did one append at a time); this bounds a wait that was
            # sent for a caller with a longer timeout.
            async with asyncio.timeout(2 * max(1, timeout_ms) / 1000):
                await asyncio.shield(due)
        except TimeoutError:
            raise NotDurable("the append was not durable in time") from None
        return reply

    def _maybe_send(self) -> None:
        """Send the due wait once nothing is in flight before it; hold new appends back
        meanwhile."""
        if self.due is None or self.waiting:
            return
        if self.gate is None:
            self.gate = asyncio.get_running_loop().create_future()
        if self.in_flight:
            return  # the last reply calls again
        due, self.due = self.due, None
        durability, timeout_ms = self.due_durability, self.due_timeout_ms
        self.due_timeout_ms = 0
        assert durability is not None
        self.waiting = True
        asyncio.get_running_loop().create_task(self._wait(due, durability, timeout_ms))

    async def _wait(self, due: asyncio.Future[None], durability: Durability, ms: int) -> None:
        WRITTEN.set(self._open_gate)  # this task's context only: the wait is written
        try:
            await durability.wait_with(self._execute, ms)
        except Exception as exc:  # every caller of this wait is told
            if not due.done():
                due.set_exception(exc)
        else:
            if not due.done():
                due.set_result(None)
        finally:
            self.waiting = False
            self._open_gate()
            self._maybe_send()

    async def _execute(self, *args: Any) -> Any:
        try:
            return await self.connection.execute(*args, ordered=True)
        except RedisError as exc:
            error = shared_failure(exc)
            if isinstance(error, ResponseError):
                raise error from None
            raise error from exc

    def _open_gate(self) -> None:
        gate, self.gate = self.gate, None
        if gate is not None and not gate.done():
            gate.set_result(None)


def _retrieved(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved: no warning when its callers timed out


async def probe(redis: Redis, min_insync_replicas: int = 1) -> tuple[Durability, str]:
    """What acks=all can wait for on this server, and one sentence saying what it then
    survives (for the log at start-up). ``min_insync_replicas`` counts Redis itself, as
    Kafka's counts the leader."""
    replicas = max(0, min_insync_replicas - 1)
    try:
        info = await redis.info("persistence")
        server = await redis.info("server")
    except ResponseError:  # INFO renamed or not allowed (a managed Redis)
        return Durability(replicas=replicas), (
            "cannot read INFO: acks=all waits for what acks=1 does (the append applied)"
            + (f" and {replicas} replica(s)" if replicas else "")
        )
    name = "Valkey" if "valkey_version" in server else "Redis"
    version = server.get("valkey_version") or server.get("redis_version", "?")
    what = f"{name} {version}"
    if not int(info.get("aof_enabled", 0)):
        return Durability(replicas=replicas), (
            f"{what} has no AOF (appendonly no): acknowledged records survive a broker "
            "crash, not a Redis restart"
        )
    fsync_policy = await appendfsync(redis)
    if fsync_policy == "always":
        # Redis answers a write only once its AOF is fsynced: every acknowledged append is
        # on disk, acks=1's too, and a WAITAOF would only cost a round trip.
        return Durability(replicas=replicas), (
            f"{what}, appendfsync always: every append is fsynced before Redis answers"
            + (f"; acks=all also waits for {replicas} replica(s)" if replicas else "")
            + "; acknowledged records survive a broker crash, a Redis crash and power loss"
        )
    try:
        waitaof = await has_waitaof(redis)
    except ResponseError:  # not allowed here: as without it
        waitaof = False
    if not waitaof:
        return Durability(replicas=replicas), (
            f"{what} has no WAITAOF (7.2+): acks=all cannot wait for the fsync; acknowledged "
            "records survive a broker or Redis crash, and with appendfsync "
            f"{fsync_policy or 'everysec'} some of them may be lost on power loss"
        )
    # Under everysec a WAITAOF is asked for, but Valkey 9.1 answers it while the fsync it
    # waits for is still running (measured with a simulated power cut, tests/power/): no
    # promise of power-loss durability is made that the server does not keep.
    return Durability(fsync=True, replicas=replicas), (
        f"{what}, appendfsync {fsync_policy or 'unknown'}: acks=all waits for WAITAOF"
        + (f" and {replicas} replica(s)" if replicas else "")
        + "; acknowledged records survive a broker crash and a Redis crash, but a power "
        "loss may take the last second of them (Valkey answers WAITAOF before its fsync "
        "under everysec): set appendfsync always to keep them"
    )


async def appendfsync(redis: Redis) -> str | None:
    """The server's appendfsync policy (always, everysec, no); None where CONFIG is not
    allowed (a managed Redis)."""
    try:
        reply = await redis.config_get("appendfsync")
    except ResponseError:
        return None
    policy = reply.get("appendfsync")
    return policy.decode() if isinstance(policy, bytes) else policy


async def has_waitaof(redis: Redis) -> bool:
    """Whether the server has WAITAOF (Redis 7.2+, Valkey): asked with one that returns at
    once. Another refusal (NOPERM, a renamed command) is raised: it says nothing of the
    fsync."""
    try:
        await redis.execute_command("WAITAOF", 0, 0, 1)
    except ResponseError as exc:
        if "unknown command" in str(exc).lower():
            return False
        raise
    return True
