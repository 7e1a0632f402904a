"""The nemesis: faults injected one at a time, in seeded random order, into a Topology
(tests/jepsen/topology.py), each logged into the history as ``info`` ops of process
``"nemesis"``: ``start-KIND`` (value: the target) when it begins and ``stop-KIND`` when the
target is back (restarted and listening, continued, healed).

Faults (each on a random target where there are several):

- ``broker-kill`` / ``broker-pause``: SIGKILL and restart (same port and options) /
  SIGSTOP then SIGCONT of a broker.
- ``redis-kill`` / ``redis-pause``: the same for redis-server (restarted from its AOF).
- ``archiver-kill`` / ``archiver-pause``: the cron-style archiver.
- ``postgres-kill`` / ``postgres-pause``: the postmaster and every backend.
- ``partition-drop``: a broker's TCP proxy to Redis closes every connection and refuses
  new ones; ``partition-hold``: it forwards nothing, connections stay open.
- ``primary-kill`` / ``primary-pause`` (sentinel, cluster): a Redis primary (the replica
  is promoted; a killed one is replaced by a new replica), ``failover`` (sentinel: SENTINEL
  FAILOVER).
- ``slot-migrate`` (cluster): a partition's slot moves whole to another primary (Valkey 9's
  atomic CLUSTER MIGRATESLOTS) while it is written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

from tests.cluster_servers import wait_until
from tests.jepsen.history import INFO, History
from tests.jepsen.topology import Cluster, Sentinel, SingleRedis, Topology
from tests.pg import _children

LOG = logging.getLogger("kafkaesque.jepsen")

COMMON = (
    "broker-kill",
    "broker-pause",
    "archiver-kill",
    "archiver-pause",
    "postgres-kill",
    "postgres-pause",
)
FAULTS = {
    "single": (*COMMON, "redis-kill", "redis-pause", "partition-drop", "partition-hold"),
    "brokers3": (*COMMON, "redis-kill", "redis-pause", "partition-drop", "partition-hold"),
    "single-volatile": (*COMMON, "redis-kill", "redis-pause", "partition-drop", "partition-hold"),
    "sentinel": (*COMMON, "primary-kill", "primary-pause", "failover"),
    "cluster": (*COMMON, "primary-kill", "primary-pause", "slot-migrate"),
}
DOWN_SECONDS = (0.0, 2.0)  # a killed process stays down this long
PAUSE_SECONDS = (4.0, 7.0)  # longer than the clients' request timeout (3 s)
PARTITION_SECONDS = (3.0, 8.0)
GAP_SECONDS = (2.0, 5.0)  # quiet time between faults


class Nemesis(threading.Thread):
    """Injects ``kinds`` (all of the topology's by default) until ``stop`` is set; the
    fault under way is finished (healed) first."""

    def __init__(
        self,
        topology: Topology,
        history: History,
        seed: int,
        kinds: tuple[str, ...] | None = None,
        gap: tuple[float, float] = GAP_SECONDS,
        first_delay: float = 3.0,
    ) -> None:
        super().__init__(name="nemesis", daemon=True)
        available = FAULTS[topology.name]
        self.kinds = kinds or available
        unknown = set(self.kinds) - set(available)
        if unknown:
            raise ValueError(f"faults {sorted(unknown)} not available on {topology.name}")
        self.topology = topology
        self.history = history
        self.rng = random.Random(seed)
        self.gap = gap
        self.first_delay = first_delay
        self.stop = threading.Event()
        self.injected: Counter[str] = Counter()
        self.errors: list[str] = []
        self.paused: set[int] = set()

    def run(self) -> None:
        if self.stop.wait(self.first_delay):
            return
        order: list[str] = []
        while not self.stop.is_set():
            if not order:  # every kind once per round, in random order
                order = list(self.kinds)
                self.rng.shuffle(order)
            kind = order.pop()
            try:
                self.inject(kind)
            except Exception as exc:  # a fault that could not be undone: the run says so
                LOG.exception("nemesis %s", kind)
                self.errors.append(f"{kind}: {exc!r}")
            self.stop.wait(self.rng.uniform(*self.gap))

    @contextlib.contextmanager
    def fault(self, kind: str, target: object) -> Iterator[None]:
        start = self.history.invoke("nemesis", f"start-{kind}", target)
        self.history.complete(start, INFO)
        self.injected[kind] += 1
        LOG.info("nemesis: %s %s", kind, target)
        try:
            yield
        finally:
            stop = self.history.invoke("nemesis", f"stop-{kind}", target)
            self.history.complete(stop, INFO)

    # --- the faults ---------------------------------------------------------------------

    def inject(self, kind: str) -> None:
        t = self.topology
        match kind:
            case "broker-kill":
                i = self.rng.randrange(len(t.brokers))
                with self.fault(kind, f"broker{i}"):
                    t.brokers[i].proc.kill()
                    t.brokers[i].proc.wait()
                    self.down()
                    t.restart_broker(i)
            case "broker-pause":
                i = self.rng.randrange(len(t.brokers))
                with self.fault(kind, f"broker{i}"):
                    self.pause([t.brokers[i].proc.pid], PAUSE_SECONDS)
            case "archiver-kill":
                assert t.archiver is not None
                with self.fault(kind, "archiver"):
                    t.archiver.kill()
                    t.archiver.wait()
                    self.down()
                    t.start_archiver()
            case "archiver-pause":
                assert t.archiver is not None
                with self.fault(kind, "archiver"):
                    self.pause([t.archiver.pid], PAUSE_SECONDS)
            case "postgres-kill":
                assert t.pg is not None
                with self.fault(kind, "postgres"):
                    t.pg.kill()
                    self.down()
                    t.pg.start()
            case "postgres-pause":
                assert t.pg is not None and t.pg.proc is not None
                postmaster = t.pg.proc.pid
                with self.fault(kind, "postgres"):
                    self.pause([postmaster, *_children(postmaster)], PAUSE_SECONDS)
            case "redis-kill":
                assert isinstance(t, SingleRedis)
                with self.fault(kind, "redis"):
                    t.redis.proc.kill()
                    t.redis.proc.wait()
                    self.down()
                    t.redis.start()
                    t.check_aof()
            case "redis-pause":
                assert isinstance(t, SingleRedis)
                with self.fault(kind, "redis"):
                    self.pause([t.redis.proc.pid], PAUSE_SECONDS)
            case "partition-drop" | "partition-hold":
                i = self.rng.randrange(len(t.proxies))
                proxy = t.proxies[i]
                with self.fault(kind, f"broker{i}<->redis"):
                    proxy.drop() if kind == "partition-drop" else proxy.hold()
                    try:
                        self.stop.wait(self.rng.uniform(*PARTITION_SECONDS))
                    finally:
                        proxy.heal()
            case "primary-kill":
                self.kill_primary(kind)
            case "primary-pause":
                self.pause_primary(kind)
            case "slot-migrate":
                assert isinstance(t, Cluster)
                slot, target = t.migration(self.rng)
                with self.fault(kind, f"slot {slot} to {target.port}"):
                    t.servers.migrate_slots(slot, slot, target, timeout=60)
            case "failover":
                assert isinstance(t, Sentinel)
                t.ready()
                with self.fault(kind, f"primary {t.servers.primary_address()[1]}"):
                    t.servers.failover(timeout=30)
            case _:
                raise ValueError(kind)

    def down(self) -> None:
        time.sleep(self.rng.uniform(*DOWN_SECONDS))

    def pause(self, pids: list[int], seconds: tuple[float, float]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                self.paused.add(pid)
        try:
            time.sleep(self.rng.uniform(*seconds))
        finally:
            self.resume()

    def resume(self) -> None:
        for pid in list(self.paused):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            self.paused.discard(pid)

    def kill_primary(self, kind: str) -> None:
        t = self.topology
        if isinstance(t, Sentinel):
            t.ready()
            primary = t.primary()
            with self.fault(kind, f"primary {primary.port}"):
                primary.kill()
                wait_until(
                    lambda: t.servers.primary_address()[1] != primary.port,
                    30,
                    "the sentinel to promote the replica",
                )
                t.replace_replica()
        elif isinstance(t, Cluster):
            node = self.rng.choice(t.live_primaries())
            with self.fault(kind, f"primary {node.port}"):
                node.process.kill()
                t.replace_node(node)
                t.servers.wait_ok(60)
        else:
            raise ValueError(f"{kind} needs sentinel or cluster")

    def pause_primary(self, kind: str) -> None:
        t = self.topology
        wait: Callable[[], None]
        if isinstance(t, Sentinel):
            t.ready()
            primary = t.primary()

            def wait() -> None:
                wait_until(
                    lambda: t.servers.primary_address()[1] != primary.port,
                    30,
                    "the sentinel to promote the replica",
                )
        elif isinstance(t, Cluster):
            node = self.rng.choice(t.live_primaries())
            primary = node.process

            def wait() -> None:
                t.servers.wait_ok(60)
        else:
            raise ValueError(f"{kind} needs sentinel or cluster")
        with self.fault(kind, f"primary {primary.port}"):
            self.pause([primary.proc.pid], PAUSE_SECONDS)
            wait()

    def finish(self, timeout: float = 120.0) -> None:
        """Stop after the fault under way; continue anything left paused."""
        self.stop.set()
        self.join(timeout)
        self.resume()
