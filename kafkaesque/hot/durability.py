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

import logging
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from kafkaesque.errors import NotDurable

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
        timeout = max(1, timeout_ms)  # 0 would mean "wait forever"
        try:
            if self.fsync:
                local, _ = await connection.execute_command("WAITAOF", 1, 0, timeout)
                if int(local) < 1:
                    raise NotDurable("the append was not fsynced to Redis' AOF in time")
            if self.replicas:
                acknowledged = int(await connection.execute_command("WAIT", self.replicas, timeout))
                if acknowledged < self.replicas:
                    raise NotDurable(
                        f"{acknowledged} of {self.replicas} Redis replicas have the append"
                    )
        except ResponseError as exc:  # e.g. AOF switched off since start-up
            raise NotDurable(f"cannot wait for the append to be durable: {exc}") from None


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
