"""The archiver's barrier: what it read from Redis is durable there before the archive
commits it. Else Redis could come back from a power loss (AOF), or fail over to a replica,
without records the archive has, and hand their offsets out again under a new epoch: the
archive would never take the new records, and Redis would drop them as archived."""

from __future__ import annotations

import time

from kafkaesque.log import Log

ASK_AGAIN_S = 10.0  # how long what Redis said of its AOF and replicas is trusted


class DurableBarrier:
    """Fsynced to Redis' AOF (when it has one) and at every connected Redis replica, at
    least ``replicas`` of them: the archiver is no producer waiting, and a replica Sentinel
    promotes must not lack what the archive holds, whatever acks=all asks of appends."""

    def __init__(self, log: Log, replicas: int) -> None:
        self.log = log
        self.replicas = replicas
        self._fsync = False
        self._connected = 0
        self._asked = -ASK_AGAIN_S  # when INFO was last asked (time.monotonic())

    async def holds(self, topic: str, partition: int, timeout: float) -> bool:
        """Whether everything read from the partition so far is durable, waiting at most
        ``timeout`` seconds (Log.replicated)."""
        if time.monotonic() - self._asked >= ASK_AGAIN_S:
            self._fsync = await self.log.aof_enabled()
            self._connected = await self.log.connected_replicas()
            self._asked = time.monotonic()
        wanted = max(self.replicas, self._connected)
        if wanted <= 0 and not self._fsync:
            return True
        held = await self.log.replicated(
            topic, partition, wanted, int(timeout * 1000), fsync=self._fsync
        )
        if not held:
            self._asked = -ASK_AGAIN_S  # a replica may have gone, the AOF off: ask again
        return held

    def __str__(self) -> str:
        wanted = ["fsynced to its AOF"] if self._fsync else []
        replicas = max(self.replicas, self._connected)
        if replicas > 0:
            wanted.append(f"at {replicas} replica(s)")
        return " and ".join(wanted)
