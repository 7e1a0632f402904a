"""The servers of a Jepsen-style run, each of which the nemesis can kill, pause, restart
or cut off, all on loopback:

- ``single``: one redis-server (AOF on), one broker, PostgreSQL, a cron-style archiver.
- ``brokers3``: the same with three brokers (node ids 1-3) sharing the Redis.
- ``sentinel``: a primary, a replica and a sentinel (tests/cluster_servers.py); brokers
  and the archiver with ``--min-insync-replicas 2`` (WAIT 1), one broker.
- ``cluster``: a Redis Cluster of 3 primaries with a replica each, ``--min-insync-replicas
  2``, one broker.
- ``single-volatile``: ``single`` with Redis' AOF off, a known-bad setup for checking
  the harness itself: a killed Redis comes back empty, so acknowledged records are lost
  and their offsets given to other records.

In ``single`` and ``brokers3`` each broker reaches Redis through a TcpProxy of its own, so
the nemesis can partition one broker from Redis while the archiver and the other brokers
still reach it. Topic pages are small and few are kept in Redis: most of a run's log is
read back from the archive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import subprocess
import sys
import threading
from pathlib import Path

import redis

from kafkaesque.hot.slots import slot_of
from tests.cluster_servers import (
    HOST,
    ClusterNode,
    ClusterServers,
    SentinelServers,
    ServerProcess,
    _common_settings,
    wait_until,
)
from tests.jepsen.workload import TOPIC
from tests.pg import PostgresServer
from tests.servers import RedisServer, free_port
from tests.wire.conftest import REPO, Broker

TOPOLOGIES = ("single", "brokers3", "sentinel", "cluster", "single-volatile")
ARCHIVE_INTERVAL = "1"
# Brokers notice a dead peer within seconds (the defaults take 9 s).
BROKER_OPTIONS = ("--broker-session-timeout-ms", "3000", "--broker-heartbeat-interval-ms", "300")
LOG = logging.getLogger("kafkaesque.jepsen")


class TcpProxy:
    """A loopback TCP proxy to ``target`` on a thread of its own (asyncio). ``drop``
    closes every connection and refuses new ones (closes them at once); ``hold`` keeps
    connections open but forwards nothing either way (a silent partition: the peer's
    requests time out, or wait); ``heal`` forwards again, including what was held."""

    def __init__(self, target_port: int, target_host: str = HOST) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.mode = "pass"
        self.loop = asyncio.new_event_loop()
        self.flowing = asyncio.Event()
        self.transports: set[asyncio.Transport] = set()
        ready = threading.Event()
        self.thread = threading.Thread(
            target=self._serve, args=(ready,), name=f"proxy-{self.port}", daemon=True
        )
        self.thread.start()
        if not ready.wait(10):
            raise RuntimeError("the proxy did not start")

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.flowing.set()
        server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, HOST, self.port, reuse_address=True)
        )
        ready.set()
        try:
            self.loop.run_forever()
        finally:
            server.close()
            for transport in list(self.transports):
                transport.abort()
            self.loop.run_until_complete(asyncio.sleep(0))
            self.loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "drop":
            writer.transport.abort()
            return
        self.transports.add(writer.transport)  # type: ignore[arg-type]
        try:
            await self.flowing.wait()  # held: not even connected upstream until healed
            if self.mode == "drop":
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return
            self.transports.add(up_writer.transport)  # type: ignore[arg-type]
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        finally:
            writer.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self.flowing.wait()
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.transport.abort()
            self.transports.discard(writer.transport)  # type: ignore[arg-type]

    def _call(self, function: object) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                function()  # type: ignore[operator]
            finally:
                done.set()

        self.loop.call_soon_threadsafe(run)
        done.wait(10)

    def drop(self) -> None:
        def act() -> None:
            self.mode = "drop"
            self.flowing.set()  # held pumps wake up, find their transport aborted
            for transport in list(self.transports):
                transport.abort()
            self.transports.clear()

        self._call(act)

    def hold(self) -> None:
        def act() -> None:
            self.mode = "hold"
            self.flowing.clear()

        self._call(act)

    def heal(self) -> None:
        def act() -> None:
            self.mode = "pass"
            self.flowing.set()

        self._call(act)

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def close(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class Topology:
    """PostgreSQL, brokers and an archiver around a Redis setup the subclass makes."""

    name = "base"
    insync = 1  # --min-insync-replicas of the brokers and the archiver

    def __init__(self, directory: Path, partitions: int, brokers: int = 1) -> None:
        self.directory = directory
        self.partitions = partitions
        self.broker_count = brokers
        self.brokers: list[Broker] = []
        self.proxies: list[TcpProxy] = []
        self.pg: PostgresServer | None = None
        self.archiver: subprocess.Popen[bytes] | None = None
        self.dsn = ""
        directory.mkdir(parents=True, exist_ok=True)

    # --- the Redis side: subclasses ---------------------------------------------------

    def start_redis(self) -> None:
        raise NotImplementedError

    def redis_url(self) -> str:
        """The URL the archiver and the CLI use (directly, never through a proxy)."""
        raise NotImplementedError

    def broker_redis_url(self, i: int) -> str:
        return self.redis_url()

    def restart_broker(self, i: int) -> None:
        """Start broker ``i`` again after a kill, pointed at Redis as it is now (a
        cluster's seeds change as killed nodes are replaced, as an operator's would)."""
        broker = self.brokers[i]
        url = self.broker_redis_url(i)
        broker.command[broker.command.index("--redis-url") + 1] = url
        broker.start()

    def stop_redis(self) -> None:
        raise NotImplementedError

    # ----------------------------------------------------------------------------------

    def start(self) -> None:
        self.start_redis()
        self.pg = PostgresServer()
        self.pg.admin("CREATE DATABASE jepsen")
        self.dsn = self.pg.dsn("jepsen")
        options = [*BROKER_OPTIONS, "--archive-interval", ARCHIVE_INTERVAL]
        options += ["--min-insync-replicas", str(self.insync)] if self.insync > 1 else []
        for i in range(self.broker_count):
            node = ["--node-id", str(i + 1)] if self.broker_count > 1 else []
            self.brokers.append(
                Broker(
                    self.broker_redis_url(i),
                    self.directory / f"broker{i}",
                    [*node, *options],
                    pg_dsn=self.dsn,
                )
            )
        self.cli(
            "create",
            TOPIC,
            "--partitions",
            str(self.partitions),
            "--page-size",
            "50",
            "--max-pages",
            "2",
        )
        self.start_archiver()

    def cli(self, *args: str) -> None:
        command = [sys.executable, "-m", "kafkaesque", "--redis-url", self.redis_url()]
        command += ["--pg-dsn", self.dsn, *args]
        result = subprocess.run(
            command,
            cwd=REPO,
            env=self.brokers[0].env,
            capture_output=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{args}: {result.stderr.decode(errors='replace')}")

    def start_archiver(self) -> None:
        """A second archiver beside the brokers', as cron would run one."""
        command = [sys.executable, "-m", "kafkaesque", "--redis-url", self.redis_url()]
        command += ["--pg-dsn", self.dsn, "archive", "--interval", ARCHIVE_INTERVAL]
        command += ["--idle-close", "2"]
        command += ["--min-insync-replicas", str(self.insync)] if self.insync > 1 else []
        with (self.directory / "archiver.log").open("ab") as out:
            self.archiver = subprocess.Popen(
                command,
                cwd=REPO,
                env=self.brokers[0].env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def tracebacks(self) -> list[str]:
        found = []
        logs = [self.directory / "archiver.log", *(b.stderr_path for b in self.brokers)]
        for path in logs:
            if path.exists():
                text = path.read_text(errors="replace")
                for part in text.split("Traceback")[1:]:
                    found.append(f"{path}: Traceback{part[:3000]}")
        return found

    def close(self) -> None:
        """Stop everything, whatever state the nemesis left it in (it heals first)."""
        for proxy in self.proxies:
            proxy.heal()
        if self.archiver is not None and self.archiver.poll() is None:
            self.archiver.kill()
            self.archiver.wait()
        for broker in self.brokers:
            broker.stop()
        for proxy in self.proxies:
            proxy.close()
        with contextlib.suppress(Exception):
            self.stop_redis()
        if self.pg is not None:
            self.pg.destroy()


class SingleRedis(Topology):
    name = "single"
    appendonly = True

    def start_redis(self) -> None:
        self.redis = RedisServer(self.directory / "redis", appendonly=self.appendonly)
        self.proxies = [TcpProxy(self.redis.port) for _ in range(self.broker_count)]

    def redis_url(self) -> str:
        return self.redis.url

    def broker_redis_url(self, i: int) -> str:
        return self.proxies[i].url

    def check_aof(self) -> None:
        """A restarted server must be the same one: AOF on, same directory and port."""
        if not self.appendonly:
            return
        client = redis.Redis(port=self.redis.port, socket_timeout=10)
        try:
            config = client.config_get("appendonly") | client.config_get("dir")
        finally:
            client.close()
        if config["appendonly"] != "yes" or Path(config["dir"]) != self.redis.directory.resolve():
            raise RuntimeError(f"redis-server runs without its AOF: {config}")

    def stop_redis(self) -> None:
        if self.redis.proc.poll() is None:
            self.redis.stop()


class Sentinel(Topology):
    name = "sentinel"
    insync = 2

    def start_redis(self) -> None:
        self.servers = SentinelServers(self.directory / "sentinel")
        self.replicas_added = 0

    def redis_url(self) -> str:
        return self.servers.url

    def primary(self) -> ServerProcess:
        address = self.servers.primary_address()
        for process in self.servers.processes():
            if process.port == address[1] and process.running():
                return process
        raise LookupError(f"no running primary at {address}")

    def ready(self, timeout: float = 60.0) -> None:
        """Until the sentinel knows a replica in sync with the primary it names (before
        a fault that needs one to promote; a failover without one fails: NOGOODSLAVE)."""

        def replica_ok() -> bool:
            primary = self.servers.primary_address()
            replicas = self.servers.sentinel.client().sentinel_slaves(self.servers.name)
            return any(
                not r.get("is_disconnected")
                and not r.get("is_sdown")
                and r.get("master-link-status") == "ok"
                and r.get("master-port") == primary[1]
                for r in replicas
            )

        wait_until(replica_ok, timeout, "a replica in sync, known to the sentinel")

    def replace_replica(self) -> None:
        """A new replica of the current primary, in place of a killed server."""
        self.replicas_added += 1
        self.servers.add_replica(self.directory / f"replica-{self.replicas_added}")

    def stop_redis(self) -> None:
        self.servers.stop()


class Cluster(Topology):
    name = "cluster"
    insync = 2

    def start_redis(self) -> None:
        self.servers = ClusterServers(self.directory / "cluster", primaries=3, replicas=1)
        self.added = 0

    def redis_url(self) -> str:
        return self.servers.cluster_url

    def live_primaries(self) -> list[ClusterNode]:
        owners = set()
        for node in self.servers.nodes():
            if node.process.running():
                owners = set(self.servers.slot_owners(node).values())
                break
        return [n for n in self.servers.nodes() if n.node_id in owners and n.process.running()]

    def migration(self, rng: random.Random) -> tuple[int, ClusterNode]:
        """The slot of a random partition of the workload's topic and a live primary that
        does not serve it: where a ``slot-migrate`` moves it."""
        slot = slot_of(TOPIC, rng.randrange(self.partitions))
        owner = self.servers.owner(slot)
        return slot, rng.choice([n for n in self.live_primaries() if n is not owner])

    def replace_node(self, dead: ClusterNode) -> None:
        """A new node, replica of the primary that took over ``dead``'s slots (what an
        operator does after a crash without persistence)."""
        self.servers.wait_ok(60)
        self.added += 1
        bus_port = free_port()
        settings = _common_settings() | {
            "cluster-enabled": "yes",
            "cluster-config-file": "nodes.conf",
            "cluster-port": str(bus_port),
            "cluster-node-timeout": "2000",
            "cluster-replica-validity-factor": "0",
        }
        process = ServerProcess(self.directory / f"added-{self.added}", settings)
        self.servers._processes.append(process)
        node_id = process.client().execute_command("CLUSTER", "MYID").decode()
        node = ClusterNode(process, node_id, bus_port)
        seed = next(n for n in self.servers.nodes() if n.process.running())
        process.client().execute_command("CLUSTER", "MEET", HOST, seed.port, seed.bus_port)
        # The primary now serving the dead node's slots: the old replica, promoted.
        primary = wait_until(
            lambda: next(
                (
                    n
                    for n in self.live_primaries()
                    if n.node_id != dead.node_id
                    and self._is_primary(n)
                    and not self._has_replica(n)
                ),
                None,
            ),
            30,
            "a primary without replica",
        )
        wait_until(
            lambda: (
                primary.node_id in process.client().execute_command("CLUSTER", "NODES").decode()
            ),
            30,
            "the new node to learn the cluster",
        )
        process.client().execute_command("CLUSTER", "REPLICATE", primary.node_id)
        self.servers.replicas.append(node)
        if primary in self.servers.replicas:  # the promoted replica: a primary now
            self.servers.replicas.remove(primary)
            self.servers.primaries.append(primary)
        # Forget the dead node everywhere, so the cluster does not wait for it.
        for other in self.servers.nodes():
            if other.process.running() and other.node_id != dead.node_id:
                with contextlib.suppress(redis.ResponseError):
                    other.client().execute_command("CLUSTER", "FORGET", dead.node_id)
        if dead in self.servers.primaries:
            self.servers.primaries.remove(dead)
        if dead in self.servers.replicas:
            self.servers.replicas.remove(dead)

    @staticmethod
    def _is_primary(node: ClusterNode) -> bool:
        """The node says it is a primary itself: another node's view of the slots can lag
        a failover (CLUSTER REPLICATE of a demoted one fails: "I can only replicate a
        master")."""
        with contextlib.suppress(redis.RedisError):
            return node.client().execute_command("ROLE")[0] in (b"master", "master")
        return False

    def _has_replica(self, primary: ClusterNode) -> bool:
        text = primary.client().execute_command("CLUSTER", "NODES").decode()
        return any(
            f" {primary.node_id} " in f" {line.split()[3]} " and "fail" not in line.split()[2]
            for line in text.splitlines()
            if len(line.split()) > 3
        )

    def stop_redis(self) -> None:
        self.servers.stop()


def make(name: str, directory: Path, partitions: int) -> Topology:
    match name:
        case "single":
            return SingleRedis(directory, partitions, brokers=1)
        case "brokers3":
            topology = SingleRedis(directory, partitions, brokers=3)
            topology.name = "brokers3"
            return topology
        case "single-volatile":
            # The harness' self-check: Redis without persistence loses acknowledged
            # records when killed; the checker must say so.
            topology = SingleRedis(directory, partitions, brokers=1)
            topology.name = "single-volatile"
            topology.appendonly = False
            return topology
        case "sentinel":
            return Sentinel(directory, partitions)
        case "cluster":
            return Cluster(directory, partitions)
    raise ValueError(f"unknown topology {name!r}: one of {', '.join(TOPOLOGIES)}")
