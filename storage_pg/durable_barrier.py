"""The archiver's barrier: what it read from Redis is durable there before the archive
commits it. Else Redis could come back from a power loss (AOF), or fail over to a replica,
without records the archive has, and hand their offsets out again under a new epoch: the
archive would never take the new records, and Redis would drop them as archived."""

from __future__ import annotations

from kafkaesque.hot.log import Log


class DurableBarrier:
    """Fsynced to the AOF of the server serving a partition (when it has one) and at every
    replica of it in sync, at least ``replicas`` of them: the archiver is no producer
    waiting, and a replica Sentinel or a cluster promotes must not lack what the archive
    holds, whatever acks=all asks of appends (Log.replicated)."""

    def __init__(self, log: Log, replicas: int) -> None:
        self.log = log
        self.replicas = replicas

    async def holds(self, topic: str, partition: int, timeout: float) -> str | None:
        """None once everything read from the partition so far is durable, waiting at
        most ``timeout`` seconds; else why not, for the archiver's report."""
        held, wanted = await self.log.replicated(
            topic, partition, self.replicas, int(timeout * 1000)
        )
        if held:
            return None
        if wanted is None:
            return "its slot moved to another Redis node meanwhile"
        needs = ["fsynced to its AOF"] if wanted.fsync else []
        if wanted.replicas > 0:
            needs.append(f"at {wanted.replicas} replica(s)")
        return (
            f"Redis did not confirm its pages durable ({' and '.join(needs)}) within {timeout:g} s"
        )
