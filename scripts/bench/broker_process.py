"""A `kafkaesque serve` subprocess for the benchmarks (Redis only: no archiving, so that
nothing but the measured traffic runs)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time


def start_broker(redis_url: str, port: int) -> subprocess.Popen:
    """Start a broker on 127.0.0.1:``port`` against ``redis_url`` and wait until it listens."""
    command = [sys.executable, "-m", "kafkaesque", "--redis-url", redis_url, "serve"]
    command += ["--listen", f"127.0.0.1:{port}", "--no-archive"]
    proc = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError("broker did not start")
