"""scripts/run.sh as a user runs it: Ctrl-C stops the broker and the embedded servers it
ran on, and their data stays for the next start. (The set-up step is stubbed out: the
test environment is set up already.)"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from kafkaesque.hot.embedded import EmbeddedRedis
from tests.servers import free_port, wait_for_port

REPO = Path(__file__).resolve().parents[1]


def checkout(tmp_path: Path) -> Path:
    """A copy of scripts/run.sh in a checkout whose .venv is this interpreter and whose
    set-up has nothing left to do."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "run.sh", root / "scripts" / "run.sh")
    (root / "scripts" / "setup.sh").write_text("#!/bin/sh\nexit 0\n")
    (root / "scripts" / "setup.sh").chmod(0o755)
    (root / ".venv" / "bin").mkdir(parents=True)
    python = root / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return root


def test_ctrl_c_on_run_sh_stops_the_embedded_servers(tmp_path: Path, private_home: Path) -> None:
    root = checkout(tmp_path)
    port = free_port()
    metrics = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "KAFKAESQUE_LISTEN": f"127.0.0.1:{port}",
        "KAFKAESQUE_METRICS": metrics,
        "PYTHONPATH": str(REPO),
    }
    script = subprocess.Popen(
        ["bash", str(root / "scripts" / "run.sh")],
        env=env,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as a terminal gives a command
    )
    try:
        wait_for_port(port, script, timeout=120)
        assert EmbeddedRedis(private_home).is_running()
        # The broker serves its Prometheus metrics on a local port.
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=30) as page:
            assert b"kafkaesque_connections " in page.read()
        os.killpg(script.pid, signal.SIGINT)  # what Ctrl-C sends: the whole group
        _, stderr = script.communicate(timeout=120)
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
            script.wait()
    assert script.returncode == 0, stderr.decode()
    assert "Traceback" not in stderr.decode()
    assert "stopped PostgreSQL and Valkey" in stderr.decode()
    assert f"metrics: http://{metrics}/metrics" in stderr.decode()
    assert not EmbeddedRedis(private_home).is_running()
    # SIGTERM to the script does the same.
    script = subprocess.Popen(
        ["bash", str(root / "scripts" / "run.sh")], env=env, stderr=subprocess.PIPE
    )
    try:
        wait_for_port(port, script, timeout=120)
        script.terminate()
        _, stderr = script.communicate(timeout=120)
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
    assert script.returncode == 0, stderr.decode()
    assert "stopped PostgreSQL and Valkey" in stderr.decode()
    assert not EmbeddedRedis(private_home).is_running()
