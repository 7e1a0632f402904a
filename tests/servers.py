"""Real servers for tests: each started on a free loopback port in a temp dir, then stopped."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from kafkaesque.embedded import redis_server_binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

    def __init__(self, directory: Path, appendonly: bool = False) -> None:
        self.port = free_port()
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        command = [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--dir", str(directory), "--save", ""]
        command += ["--appendonly", "yes" if appendonly else "no"]
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
