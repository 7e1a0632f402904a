"""Where the CLI's data lives and what a command leaves behind, as users run it (real
processes, real servers): the per-user data directory whatever the working directory; a
read of a directory without a store creates and starts nothing; a failed command stops
the servers it started; a broker whose embedded Valkey was stopped stops too; a wrong
--redis-url is one error line."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkaesque.hot.embedded import EmbeddedRedis, default_home
from storage_pg.embedded import EmbeddedPostgres
from tests.cli_in_turn import CommandsInTurn
from tests.servers import free_port, wait_for_port


def environment(**settings: str) -> dict[str, str]:
    """This environment without the user's KAFKAESQUE_* settings, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKAESQUE_")}
    env.pop("XDG_DATA_HOME", None)
    return {**env, **settings}


def run(
    *args: str, env: dict[str, str], cwd: Path | None = None, input: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkaesque", *args],
        input=input.decode() if input is not None else None,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def text(result: subprocess.CompletedProcess[bytes]) -> subprocess.CompletedProcess[str]:
    """``result`` with its output decoded (as ``run`` returns it)."""
    stdout, stderr = result.stdout.decode(), result.stderr.decode()
    return subprocess.CompletedProcess(result.args, result.returncode, stdout, stderr)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory directly under /tmp (the data directory's socket path must be short),
    traversable (as root the embedded PostgreSQL runs as another user); what ran in its
    data directories is stopped afterwards."""
    parent = Path(tempfile.mkdtemp(prefix="ks-store-"))
    parent.chmod(0o755)
    yield parent
    for pidfile in parent.rglob("redis.pid"):
        EmbeddedRedis(pidfile.parent).stop()
    for info in parent.rglob("postgres.json"):
        postgres = EmbeddedPostgres(info.parent)
        postgres.stop()
        if postgres.link.is_symlink():
            shutil.rmtree(postgres.link.resolve(), ignore_errors=True)
    shutil.rmtree(parent, ignore_errors=True)


def processes_under(path: Path) -> list[str]:
    """Command lines of running processes that name ``path`` (servers started there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(path) in command and "pytest" not in command:
            found.append(command)
    return found


def test_the_default_data_directory_is_the_users(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KAFKAESQUE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert default_home() == tmp_path / ".local" / "share" / "kafkaesque"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    assert default_home() == tmp_path / ".local" / "share" / "kafkaesque"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_home() == tmp_path / "data" / "kafkaesque"
    monkeypatch.setenv("KAFKAESQUE_HOME", str(tmp_path / "mine"))
    assert default_home() == tmp_path / "mine"


def test_commands_find_the_data_from_any_directory(short_dir: Path) -> None:
    env = environment(XDG_DATA_HOME=str(short_dir / "xdg"), HOME=str(short_dir / "user"))
    here, there = short_dir / "here", short_dir / "there"
    here.mkdir()
    there.mkdir()
    assert run("create", "words", env=env, cwd=here).returncode == 0
    produced = run("produce", "words", env=env, cwd=here, input=b"one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    consumed = run("consume", "words", env=env, cwd=there)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == "one\ntwo\n"
    assert run("topics", env=env, cwd=short_dir).stdout == "words\n"
    assert EmbeddedRedis(short_dir / "xdg" / "kafkaesque").is_running()
    assert not list(here.iterdir()) and not list(there.iterdir())  # no ./.kafkaesque
    # Without XDG_DATA_HOME: ~/.local/share/kafkaesque.
    del env["XDG_DATA_HOME"]
    (short_dir / "user").mkdir()
    assert run("create", "other", env=env, cwd=here).returncode == 0
    assert run("topics", env=env, cwd=there).stdout == "other\n"
    assert EmbeddedRedis(short_dir / "user" / ".local" / "share" / "kafkaesque").is_running()
    stopped = run("stop", env=env, cwd=there)
    assert stopped.stderr == "stopped Valkey\n"


READS = [
    ["consume", "words"],
    ["describe", "words"],
    ["group", "g"],
    ["groups"],
    ["topics"],
    ["brokers"],
    ["transactions", "list"],
    ["transactions", "describe", "tx"],
    ["users", "list"],
    ["acls", "list"],
    ["quotas", "list"],
    # They change what must exist already: with no store there is nothing to change.
    ["delete", "words"],
    ["alter", "words", "--partitions", "2"],
    ["delete-records", "words", "--before", "end"],
    ["compact"],
    ["group", "g", "words", "--reset-offsets", "earliest"],
]


@pytest.mark.parametrize("exists", [False, True], ids=["missing", "empty"])
def test_a_read_without_a_store_creates_and_starts_nothing(short_dir: Path, exists: bool) -> None:
    """Each read in turn, by one CLI process (tests/cli_in_turn.py), checked for what it
    created and started before the next; the first also by `python -m kafkaesque`."""
    home = short_dir / "nothing"
    if exists:
        home.mkdir()
    env = environment(HOME=str(short_dir))
    first = run("--home", str(home), *READS[0], env=env, cwd=short_dir)
    cli = CommandsInTurn(env, short_dir)
    for args in READS:
        result = text(cli.run("--home", str(home), *args))
        assert (first.returncode, first.stderr) == (result.returncode, result.stderr)
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr == (
            f"Error: no kafkaesque data at {home}: start one with `kafkaesque serve` "
            "or give --home/--redis-url\n"
        ), args
        assert home.is_dir() == exists and not (exists and list(home.iterdir())), args
        assert processes_under(home) == [], args
    cli.close()
    stopped = run("--home", str(home), "stop", env=env, cwd=short_dir)
    assert stopped.returncode == 0 and stopped.stderr == "nothing was running\n"
    assert sorted(p.name for p in short_dir.iterdir()) == (["nothing"] if exists else [])
    assert not (exists and list(home.iterdir()))


def test_serve_on_a_taken_port_stops_the_servers_it_started(short_dir: Path) -> None:
    home = short_dir / "ks"
    env = environment(KAFKAESQUE_HOME=str(home))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", "--listen", f"127.0.0.1:{port}", env=env)
        assert result.returncode == 1
        assert result.stderr.splitlines()[-1].startswith(
            f"Error: cannot listen on 127.0.0.1:{port}"
        )
        assert "Traceback" not in result.stderr
        assert not EmbeddedRedis(home).is_running()
        assert not EmbeddedPostgres(home).is_running()
        assert processes_under(home) == []
        # Servers it found running are not its to stop.
        assert run("create", "t", env=env).returncode == 0
        assert run("archive", "--once", env=env).returncode == 0  # starts PostgreSQL
        result = run("serve", "--listen", f"127.0.0.1:{port}", env=env)
        assert result.returncode == 1
        assert EmbeddedRedis(home).is_running()
        assert EmbeddedPostgres(home).is_running()


def test_serve_without_postgresql_stops_the_valkey_it_started(short_dir: Path) -> None:
    home = short_dir / "ks"
    env = environment(KAFKAESQUE_HOME=str(home), KAFKAESQUE_PG_BIN=str(short_dir / "nothing"))
    result = run("serve", "--listen", f"127.0.0.1:{free_port()}", env=env)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"Error: no PostgreSQL binaries (initdb) in {short_dir / 'nothing'}"
    )
    assert not EmbeddedRedis(home).is_running()
    assert processes_under(home) == []


def test_a_bad_pg_dsn_stops_the_valkey_the_command_started(short_dir: Path) -> None:
    home = short_dir / "ks"
    env = environment(KAFKAESQUE_HOME=str(home))
    bad = f"postgresql://user:secret@127.0.0.1:{free_port()}/db"
    serve = ["--pg-dsn", bad, "serve", "--listen", f"127.0.0.1:{free_port()}"]
    # A new data directory, then one whose Valkey is stopped.
    for args in (["archive", "--once", "--pg-dsn", bad], serve):
        result = run(*args, env=env)
        assert result.returncode == 1
        last = result.stderr.splitlines()[-1]
        assert last.startswith(("Error: cannot reach PostgreSQL", "Error: the archive is")), last
        assert "unreachable" in last or "cannot reach" in last
        assert "Traceback" not in result.stderr and "secret" not in result.stderr
        assert not EmbeddedRedis(home).is_running()
        assert processes_under(home) == []
    # Running before: it stays.
    assert run("create", "t", env=env).returncode == 0
    assert run("archive", "--once", "--pg-dsn", bad, env=env).returncode == 1
    assert EmbeddedRedis(home).is_running()


def test_a_broker_stops_when_its_valkey_is_stopped(short_dir: Path) -> None:
    home = short_dir / "ks"
    port = free_port()
    env = environment(KAFKAESQUE_HOME=str(home))
    broker = subprocess.Popen(
        [sys.executable, "-m", "kafkaesque", "serve", "--listen", f"127.0.0.1:{port}"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_port(port, broker, timeout=120)
        assert run("stop", env=env).returncode == 1  # refused while the broker runs
        stopped = run("stop", "--force", env=env)
        assert stopped.stderr == "stopped PostgreSQL and Valkey\n"
        started = time.monotonic()
        _, stderr = broker.communicate(timeout=60)
    finally:
        if broker.poll() is None:
            broker.send_signal(signal.SIGKILL)
            broker.wait()
    assert time.monotonic() - started < 15
    assert broker.returncode == 1, stderr
    assert stderr.splitlines()[-1] == (
        f"Error: the embedded Valkey of {home} was stopped (`kafkaesque stop --force`?): "
        "the broker stopped with it"
    )
    assert "retrying until it is back" not in stderr
    assert "could not hand partitions over" not in stderr  # the exit line says it, once
    assert "Traceback" not in stderr
    assert processes_under(home) == []


def test_a_wrong_redis_url_is_one_error_line(short_dir: Path) -> None:
    env = environment(KAFKAESQUE_HOME=str(short_dir / "ks"))
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    expected = f"Error: cannot reach Redis: 127.0.0.1:{port} (connection refused)\n"
    for args in (
        ["topics"],
        ["consume", "t"],
        ["serve", "--no-archive", "--listen", f"127.0.0.1:{free_port()}"],
    ):
        result = run("--redis-url", url, *args, env=env)
        assert result.returncode == 1, args
        lines = [line for line in result.stderr.splitlines() if " INFO " not in line]
        assert lines == [expected.rstrip("\n")], (args, result.stderr)
    # -v adds INFO lines, -vv DEBUG ones (the attempt); the error is the last line.
    verbose = run("-vv", "--redis-url", url, "topics", env=env)
    assert verbose.returncode == 1
    assert " DEBUG kafkaesque.redis: cannot reach Redis" in verbose.stderr
    assert verbose.stderr.endswith(expected)
    assert "retrying" not in verbose.stderr
    assert not (short_dir / "ks").exists()


def test_usage_errors_exit_2_other_failures_1(short_dir: Path) -> None:
    """By one CLI process (tests/cli_in_turn.py), the first also by `python -m kafkaesque`."""
    env = environment(KAFKAESQUE_HOME=str(short_dir / "ks"))
    first = run("stop", "--nonsense", env=env)
    cli = CommandsInTurn(env, short_dir)
    assert (first.returncode, first.stderr) == (2, text(cli.run("stop", "--nonsense")).stderr)
    for args in (
        ["stop", "--nonsense"],
        ["serve", "--listen", "nowhere"],
        ["serve", "--sasl-enabled-mechanisms", "NONE"],
        ["archive", "--once", "--interval", "1"],
        ["--redis-url", "redis://127.0.0.1:1/0", "archive", "--once"],
    ):
        result = text(cli.run(*args))
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.splitlines()) == 1, (args, result.stderr)
    assert processes_under(short_dir) == []
    help_text = text(cli.run("--help")).stdout
    assert "Valkey" in help_text and "redis-server" not in help_text
    cli.close()


def test_archive_as_a_service_waits_for_redis_and_says_so_once(
    short_dir: Path, pg_dsn: str
) -> None:
    env = environment(KAFKAESQUE_HOME=str(short_dir / "ks"))
    url = f"redis://127.0.0.1:{free_port()}/0"
    args = ["--redis-url", url, "archive", "--interval", "0.1", "--pg-dsn", pg_dsn]
    archiver = subprocess.Popen(
        [sys.executable, "-m", "kafkaesque", *args],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3)
        assert archiver.poll() is None  # still waiting for its Redis
        archiver.send_signal(signal.SIGINT)
        _, stderr = archiver.communicate(timeout=60)
    finally:
        if archiver.poll() is None:
            archiver.kill()
            archiver.wait()
    assert stderr.count("retrying until it is back") == 1, stderr
    assert "Error" not in stderr
