"""The archiver's barrier: what it read from Redis is durable there before the archive
commits it. Else Redis could come back from a power loss (AOF), or fail over to a replica,
without records the archive has, and hand their offsets out again under the same epoch:
the archive would never take the new records, and Redis would drop them as archived."""

from __future__ import annotations

from kafkaesque.log import Log


class DurableBarrier:
    """Fsynced to Redis' AOF (when it has one) and at ``replicas`` Redis replicas."""

    def __init__(self, log: Log, replicas: int) -> None:
        self.log = log
        self.replicas = replicas
        self._fsync: bool | None = None  # whether Redis has an AOF: asked on first use

    async def holds(self, topic: str, partition: int, timeout: float) -> bool:
        """Whether everything read from the partition so far is durable, waiting at most
        ``timeout`` seconds (Log.replicated)."""
        if self._fsync is None:
            self._fsync = await self.log.aof_enabled()
        if self.replicas <= 0 and not self._fsync:
            return True
        held = await self.log.replicated(
            topic, partition, self.replicas, int(timeout * 1000), fsync=self._fsync
        )
        if not held:
            self._fsync = None  # the AOF may have been switched off since: ask again
        return held

    def __str__(self) -> str:
        wanted = ["fsynced to its AOF"] if self._fsync else []
        if self.replicas > 0:
            wanted.append(f"at {self.replicas} replica(s)")
        return " and ".join(wanted)
