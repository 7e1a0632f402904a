"""Real servers for tests: each started on a free loopback port in a temp dir, then stopped."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from kafkaesque.hot.embedded import redis_server_binary


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_handed_out: set[int] = set()


def _port_range() -> range:
    """This process's share of the ports below the ephemeral range: all of them, or under
    pytest-xdist one slice per worker, so that workers never pick the same port (a port
    is free when picked, and taken only when its server starts, a moment later)."""
    high = _ephemeral_floor()
    low = max(1024, high - 12000)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count <= 1:
        return range(low, high)
    size = (high - low) // count
    start = low + int(worker[2:]) % count * size
    return range(start, start + size)


def free_port() -> int:
    """A free loopback port below the ephemeral range. A port the kernel hands out
    (bind to 0) may meanwhile become the local port of an outgoing connection, or of a
    connect that wait_for_port makes to it (TCP can connect a socket to itself), and the
    server that should listen there then finds it taken. Never the same port twice in one
    process (a test may pick several before it starts their servers), and under
    pytest-xdist from the worker's own slice of the range."""
    ports = _port_range()
    if len(_handed_out) > len(ports) // 2:
        _handed_out.clear()
    for _ in range(200):
        port = random.choice(ports)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free port found")


# Seconds a broker or console may take to listen: a few on an idle machine, much more on a
# loaded one (a server that exits fails at once, not after this).
START_TIMEOUT = 60.0


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on port {port}")


class RedisServer:
    """A throwaway redis-server: no persistence unless asked, loopback only."""

    def __init__(
        self, directory: Path, appendonly: bool = False, extra_args: Sequence[str] = ()
    ) -> None:
        self.port = free_port()
        self.directory = directory
        self.appendonly = appendonly
        self.extra_args = list(extra_args)
        directory.mkdir(parents=True, exist_ok=True)
        self.start()

    def start(self) -> None:
        """Start the server (again, after ``stop``: same port and directory)."""
        command = [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--dir", str(self.directory), "--save", ""]
        command += ["--appendonly", "yes" if self.appendonly else "no", *self.extra_args]
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, self.proc)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
