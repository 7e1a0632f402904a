"""Real servers for tests: each started on a free loopback port in a temp dir, then stopped."""

from __future__ import annotations

import random
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from kafkaesque.embedded import redis_server_binary


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free loopback port below the ephemeral range. A port the kernel hands out
    (bind to 0) may meanwhile become the local port of an outgoing connection, or of a
    connect that wait_for_port makes to it (TCP can connect a socket to itself), and the
    server that should listen there then finds it taken."""
    high = _ephemeral_floor()
    for _ in range(100):
        port = random.randrange(max(1024, high - 12000), high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port found")


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
