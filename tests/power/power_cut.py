"""A simulated power cut of the embedded Redis server.

The server runs under ``fsync_shim.c`` (LD_PRELOAD), which records the size of each AOF
file whenever an fsync of it succeeds. Cutting the power kills the server (SIGKILL) and
truncates each AOF file to what its last fsync covered: the bytes that sat in the page
cache are gone, as they would be after a power loss. What the server then loads is what a
machine that lost its power would have found on disk.

``through_a_power_cut`` runs a producer through a real broker into such a server, cuts
the power and reads the log back. Used by tests/power/test_power_cut.py and
scripts/bench/power_cut.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkaesque.hot.embedded import EmbeddedRedis
from tests.wire.conftest import Broker

SHIM_SOURCE = Path(__file__).with_name("fsync_shim.c")


def build_shim(directory: Path) -> Path:
    """Compile the fsync recorder into ``directory``; returns the shared object."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("a C compiler (cc or gcc) is needed for the power-cut simulation")
    shim = directory / "fsync_shim.so"
    command = [compiler, "-shared", "-fPIC", "-O2", "-o", str(shim), str(SHIM_SOURCE), "-ldl"]
    subprocess.run(command, check=True, capture_output=True)
    return shim


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """``values`` in os.environ for the block: the daemonized server inherits them."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class PowerCutServer:
    """The embedded server of ``home`` (its own configuration: AOF on, the fsync policy
    kafkaesque sets), started under the fsync recorder; each AOF fsync stalls
    ``fsync_delay_ms`` (a slow disk makes any answer given before the fsync visible)."""

    def __init__(self, home: Path, shim: Path, fsync_delay_ms: int = 0) -> None:
        self.embedded = EmbeddedRedis(home)
        self.fsync_log = home.parent / f"{home.name}-fsync.log"
        self.shim = shim
        self.fsync_delay_ms = fsync_delay_ms

    @property
    def url(self) -> str:
        return self.embedded.url

    @property
    def aof_directory(self) -> Path:
        return self.embedded.home / "redis" / "appendonlydir"

    def start(self) -> str:
        """Start the server under the recorder; returns its URL."""
        with _environment(
            LD_PRELOAD=str(self.shim),
            KS_FSYNC_LOG=str(self.fsync_log),
            KS_FSYNC_DELAY_MS=str(self.fsync_delay_ms),
        ):
            return self.embedded.ensure_started()

    def synced_sizes(self) -> dict[str, int]:
        """Each AOF file's size at its last successful fsync, by file name."""
        sizes: dict[str, int] = {}
        if self.fsync_log.exists():
            for line in self.fsync_log.read_text().splitlines():
                size, _, path = line.partition(" ")
                sizes[Path(path).name] = int(size)
        return sizes

    def cut_power(self) -> dict[str, int]:
        """Kill the server and drop from each AOF file what no fsync covered. Returns the
        bytes dropped per file. A file written under a temporary name, fsynced and then
        renamed (the rewrite's base, the manifest) is complete; an incremental file no
        fsync covered at all is emptied."""
        pid = int(self.embedded.pidfile.read_text())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _alive(pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server (pid {pid}) did not die")
            time.sleep(0.01)
        synced = self.synced_sizes()
        dropped: dict[str, int] = {}
        for path in self.aof_directory.iterdir():
            if path.name in synced:
                keep = synced[path.name]
            elif path.name.endswith(".incr.aof"):
                keep = 0
            else:
                continue
            size = path.stat().st_size
            if size > keep:
                os.truncate(path, keep)
                dropped[path.name] = size - keep
        return dropped

    def restart(self) -> str:
        """Start the server again on what the power cut left, without the recorder."""
        self.embedded.socket.unlink(missing_ok=True)
        return self.embedded.ensure_started()

    def stop(self) -> None:
        self.embedded.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child of ours stays a zombie until reaped; the daemonized server is not ours.
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][:1] != "Z"
    return False


TOPIC = "power"
PARTITIONS = 2
Records = dict[tuple[int, int], bytes]  # (partition, offset) -> value


@dataclass(frozen=True)
class Outcome:
    """One producer through a power cut: records/s acknowledged while producing, the
    records acknowledged, those of them the cut lost or changed, AOF bytes dropped."""

    rate: float
    acknowledged: Records
    lost: Records
    dropped: dict[str, int]


def through_a_power_cut(
    directory: Path,
    shim: Path,
    acks: str,
    seconds: float,
    fsync_delay_ms: int = 0,
    appendfsync: str | None = None,
) -> Outcome:
    """A fresh embedded server under the fsync recorder (``appendfsync`` set after start
    when given) and a broker on it; a producer (idempotent with acks=all) flat out for
    ``seconds``; the power cut with records in flight (broker and server killed, the AOF
    cut back); then the log read back through a new broker."""
    server = PowerCutServer(directory / "home", shim, fsync_delay_ms)
    url = server.start()
    try:
        if appendfsync is not None:
            admin = redis.Redis(unix_socket_path=str(server.embedded.socket))
            admin.config_set("appendfsync", appendfsync)
            admin.close()
        broker = Broker(url, directory / "broker")
        try:
            created = AdminClient({"bootstrap.servers": broker.bootstrap})
            created.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(30)
            acknowledged, rate = _produce(broker.bootstrap, seconds, acks)
        finally:
            broker.proc.kill()  # the power goes for the broker too
            broker.proc.wait()
        dropped = server.cut_power()
        server.restart()
        broker = Broker(url, directory / "after")
        try:
            found = _read_all(broker.bootstrap)
        finally:
            broker.stop()
    finally:
        server.stop()
    lost = {key: value for key, value in acknowledged.items() if found.get(key) != value}
    return Outcome(rate, acknowledged, lost, dropped)


def _produce(bootstrap: str, seconds: float, acks: str) -> tuple[Records, float]:
    """What a producer flat out for ``seconds`` was told was written, and how fast."""
    acknowledged: Records = {}

    def delivered(error: object, message: object) -> None:
        if error is None:
            acknowledged[(message.partition(), message.offset())] = message.value()  # type: ignore[attr-defined]

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "enable.idempotence": acks == "all",
            "linger.ms": 5,
        }
    )
    started = time.monotonic()
    i = 0
    while time.monotonic() - started < seconds:
        try:
            value = b"%d-" % i + b"v" * 100
            producer.produce(TOPIC, value, partition=i % PARTITIONS, on_delivery=delivered)
            i += 1
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    # The power goes while records are still in flight: only what was answered counts.
    producer.poll(0)
    return acknowledged, len(acknowledged) / (time.monotonic() - started)


def _read_all(bootstrap: str) -> Records:
    """Every record of the topic, from offset 0 to the end."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=20)[1]
        for p in range(PARTITIONS)
    }
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    found: Records = {}
    deadline = time.monotonic() + 120
    while any(sum(1 for (p, _) in found if p == q) < ends[q] for q in ends):
        if time.monotonic() > deadline:
            raise RuntimeError("could not read the log back")
        for message in consumer.consume(10_000, 0.5):
            if message.error() is not None:
                raise RuntimeError(f"reading the log back: {message.error()}")
            found[(message.partition(), message.offset())] = message.value()
    consumer.close()
    return found
