"""The CLI as users run it: real processes on the embedded default (a private redis-server)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkaesque.hot.embedded import EmbeddedRedis
from tests.servers import free_port, wait_for_port

WORDS = Path("/usr/share/dict/words")


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A data directory whose embedded redis-server is stopped after the test."""
    home = tmp_path / "ks"
    yield home
    subprocess.run([sys.executable, "-m", "kafkaesque", "--home", str(home), "stop"], check=False)


def run(
    home: Path, *args: str, input: bytes | None = None, script: bool = False
) -> subprocess.CompletedProcess:
    exe = (
        [str(Path(sys.executable).with_name("kafkaesque"))]
        if script
        else [sys.executable, "-m", "kafkaesque"]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKAESQUE_")}
    env["KAFKAESQUE_HOME"] = str(home)
    return subprocess.run([*exe, *args], input=input, capture_output=True, env=env, timeout=120)


def test_words_round_trip_on_the_embedded_default(home: Path) -> None:
    assert WORDS.exists(), "the test setup installs the word list (wamerican)"
    created = run(home, "create", "words", "--page-size", "4096")
    assert created.returncode == 0, created.stderr
    produced = run(home, "produce", "--batch-size", "1024", "words", str(WORDS))
    assert produced.returncode == 0, produced.stderr
    assert b"produced 104334 records" in produced.stderr
    consumed = run(home, "consume", "--fetch-size", "512", "words")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == WORDS.read_bytes()
    # The console script is the same program; data survives a stop and restart (AOF).
    stopped = run(home, "stop", script=True)
    assert stopped.returncode == 0 and b"stopped" in stopped.stderr
    again = run(home, "consume", "words", script=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout == WORDS.read_bytes()


def test_follow_waits_for_new_records(home: Path) -> None:
    assert run(home, "create", "live").returncode == 0
    assert run(home, "produce", "live", input=b"first\n").returncode == 0
    env = {**os.environ, "KAFKAESQUE_HOME": str(home)}
    env.pop("KAFKAESQUE_REDIS_URL", None)
    follower = subprocess.Popen(
        [sys.executable, "-m", "kafkaesque", "consume", "live", "--follow"],
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == b"first\n"
        started = time.monotonic()
        assert run(home, "produce", "live", input=b"second\nthird\n").returncode == 0
        assert follower.stdout.readline() == b"second\n"
        assert follower.stdout.readline() == b"third\n"
        assert time.monotonic() - started < 5
        # A partition added while following is followed too.
        assert run(home, "alter", "live", "--partitions", "2").returncode == 0
        added = run(home, "produce", "live", "--partition", "1", input=b"in-new\n")
        assert added.returncode == 0
        assert follower.stdout.readline() == b"in-new\n"
        assert follower.poll() is None  # still following
    finally:
        follower.terminate()
        follower.wait(10)


def test_broken_pipe_is_quiet(home: Path) -> None:
    assert run(home, "create", "many").returncode == 0
    assert run(home, "produce", "many", input=b"x\n" * 200_000).returncode == 0
    env = {**os.environ, "KAFKAESQUE_HOME": str(home)}
    pipeline = subprocess.run(
        f"{sys.executable} -m kafkaesque consume many | head -n 1",
        shell=True,
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert pipeline.stdout == b"x\n"
    assert b"Traceback" not in pipeline.stderr
    assert b"Error" not in pipeline.stderr


def test_serve_on_a_taken_address_fails_at_once(home: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        result = run(home, "serve", "--no-archive", "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert b"cannot listen on 127.0.0.1" in result.stderr and b"in use" in result.stderr
    assert b"Traceback" not in result.stderr
    assert time.monotonic() - started < 60


def start_broker(home: Path) -> subprocess.Popen[bytes]:
    """`serve` on the embedded servers of ``home``, listening once this returns."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKAESQUE_")}
    env["KAFKAESQUE_HOME"] = str(home)
    command = [sys.executable, "-m", "kafkaesque", "serve", "--no-archive"]
    broker = subprocess.Popen(
        [*command, "--listen", f"127.0.0.1:{port}"], env=env, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, broker, timeout=60)
    except BaseException:
        broker.kill()
        broker.wait(10)
        raise
    return broker


def test_stop_refuses_while_a_broker_uses_the_servers(home: Path) -> None:
    broker = start_broker(home)
    try:
        refused = run(home, "stop")
        assert refused.returncode == 1
        assert refused.stderr.decode().splitlines() == [
            f"Error: a broker (kafkaesque serve) is using the servers of {home}: stop it "
            "first (they stop with it under scripts/run.sh), or use stop --force"
        ]
        assert run(home, "topics").returncode == 0  # the servers still run
        assert EmbeddedRedis(home).is_running()
    finally:
        broker.terminate()
        broker.wait(30)
    # Once the broker is gone, stop stops.
    stopped = run(home, "stop")
    assert stopped.returncode == 0 and b"stopped Valkey" in stopped.stderr
    assert not EmbeddedRedis(home).is_running()


def test_stop_force_stops_under_a_broker(home: Path) -> None:
    broker = start_broker(home)
    try:
        forced = run(home, "stop", "--force")
        assert forced.returncode == 0 and b"stopped Valkey" in forced.stderr
        assert not EmbeddedRedis(home).is_running()
    finally:
        broker.terminate()
        broker.wait(30)


def test_a_missing_parent_of_home_is_one_error_and_starts_nothing(tmp_path: Path) -> None:
    home = tmp_path / "missing" / "dir"
    for args, env_home in ((["--home", str(home)], None), ([], str(home))):
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKAESQUE_")}
        if env_home is not None:
            env["KAFKAESQUE_HOME"] = env_home
        result = subprocess.run(
            [sys.executable, "-m", "kafkaesque", *args, "topics"],
            capture_output=True,
            env=env,
            timeout=60,
        )
        assert result.returncode == 2
        assert result.stderr.decode().splitlines() == [
            f"Error: Invalid value for '--home': {tmp_path / 'missing'} does not exist; the data "
            "directory goes in an existing one (see 'python -m kafkaesque --help')"
        ]
        assert not (tmp_path / "missing").exists()  # no directory, so no server either
