"""The Kafka wire server as a real subprocess, for tests with real Kafka clients.

``broker`` is one server per test module on a free loopback port, against the session's
redis-server (flushed when the server starts). Each test gets the same server; after the
test, the server must still be running and its stderr must not show a Traceback. Tests keep
their topics unique with ``topic_name``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import redis

from tests.pg import PostgresServer
from tests.servers import START_TIMEOUT, RedisServer, free_port, wait_for_port
from tests.wire.clients import Client, make

REPO = Path(__file__).resolve().parents[2]
CLI_TIMEOUT = 120.0  # seconds for one CLI command
# How a serve option or --config sets group.initial.rebalance.delay.ms.
INITIAL_DELAY = ("--group-initial-rebalance-delay-ms", "group.initial.rebalance.delay.ms")


class Broker:
    """A ``python -m kafkaesque serve`` process; archiving to ``pg_dsn`` when given, else
    not at all. Its data directory (and its CLI commands') is private to the test."""

    def __init__(
        self,
        redis_url: str,
        directory: Path,
        extra_args: Sequence[str] = (),
        pg_dsn: str | None = None,
        assign_node_id: bool = False,
    ) -> None:
        self.redis_url = redis_url
        self.global_args = ["--redis-url", redis_url]
        self.global_args += ["--pg-dsn", pg_dsn] if pg_dsn else []
        self.env = {**os.environ, "KAFKAESQUE_HOME": str(directory / "home")}
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.stderr_path = directory / "server.stderr"
        self.stdout_path = directory / "server.stdout"
        command = [sys.executable, "-m", "kafkaesque", *self.global_args, "serve"]
        command += ["--listen", self.bootstrap, "--advertised-host", "127.0.0.1"]
        command += [] if pg_dsn else ["--no-archive"]
        if "--node-id" not in extra_args and not assign_node_id:
            # Brokers of one test module share its Redis with other options each: one
            # node id keeps each answering for itself instead of forming a cluster.
            command += ["--node-id", "0"]
        if not any(a.startswith(INITIAL_DELAY) for a in extra_args):
            # A new group waits 0.2 s for more members, not Kafka's 3 s: a test's members
            # start together (tests/test_groups.py checks the delay itself).
            command += [INITIAL_DELAY[0], "200"]
        command += extra_args
        self.command = command
        self.start()

    def start(self) -> None:
        """Start the server (again, after it stopped or was killed: same port, data
        directory and options; its output is appended to the same files)."""
        with self.stderr_path.open("ab") as err, self.stdout_path.open("ab") as out:
            self.proc = subprocess.Popen(
                self.command,
                cwd=REPO,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        try:
            wait_for_port(self.port, self.proc, timeout=START_TIMEOUT)
        except RuntimeError as exc:
            self.stop()
            raise RuntimeError(f"{exc}; server stderr:\n{self.stderr()}") from None

    def stderr(self, start: int = 0) -> str:
        with self.stderr_path.open("rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")

    def stderr_size(self) -> int:
        return self.stderr_path.stat().st_size

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        """SIGTERM, wait; kill if it does not stop. Returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def cli(
        self,
        *args: str,
        input: bytes | None = None,
        check: bool = True,
        timeout: float = CLI_TIMEOUT,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``python -m kafkaesque --redis-url URL ARGS...`` on the broker's Redis."""
        command = [sys.executable, "-m", "kafkaesque", *self.global_args, *args]
        result = subprocess.run(
            command,
            cwd=REPO,
            env=self.env,
            input=input,
            capture_output=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited with {result.returncode}:\n"
                f"{result.stderr.decode(errors='replace')}"
            )
        return result


@contextlib.contextmanager
def broker_of_its_own(
    directory: Path, pg_server: PostgresServer, options: Sequence[str]
) -> Iterator[tuple[Broker, str]]:
    """An archiving broker with ``options`` on a redis-server and an archive database of
    its own (for tests that flush Redis under it), with the archive's DSN; it must stop
    on SIGTERM without a Traceback."""
    server = RedisServer(directory / "redis")
    try:
        with pg_server.database() as dsn:
            broker = Broker(server.url, directory / "broker", options, dsn)
            try:
                yield broker, dsn
            finally:
                status = broker.stop()
                assert "Traceback" not in broker.stderr(), broker.stderr()
                assert status in (0, -signal.SIGTERM), f"exit status {status} on SIGTERM"
    finally:
        server.stop()


def check_log(broker: Broker, start: int, what: str) -> None:
    """Fail if the server died or logged a Traceback since ``start`` (a stderr position)."""
    text = broker.stderr(start)
    if "Traceback" in text:
        pytest.fail(f"the server logged a Traceback during {what}:\n{text}", pytrace=False)
    if not broker.alive():
        pytest.fail(
            f"the server exited with {broker.proc.returncode} during {what}:\n{text}",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def broker_factory(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Broker]]:
    """Starts servers with extra ``serve`` options, on a Redis emptied when the module
    began (nothing an earlier module left, such as a registered broker or a partition's
    leader, reaches these); all stopped at the end of the module."""
    redis.Redis.from_url(redis_server.url).flushall()
    started: list[Broker] = []

    def start(*extra_args: str) -> Broker:
        server = Broker(redis_server.url, tmp_path_factory.mktemp("broker"), extra_args)
        started.append(server)
        return server

    yield start
    failures = []
    for server in started:
        status = server.stop()
        text = server.stderr()
        if "Traceback" in text:
            failures.append(f"{' '.join(server.command)}: Traceback in stderr:\n{text}")
        elif status not in (0, -signal.SIGTERM):
            failures.append(f"{' '.join(server.command)}: exit status {status} on SIGTERM")
    if failures:
        pytest.fail("\n\n".join(failures), pytrace=False)


@pytest.fixture(scope="module")
def module_broker(
    broker_factory: Callable[..., Broker],
    request: pytest.FixtureRequest,
) -> Broker:
    """One server per test module, on an empty Redis, started with the module's
    ``BROKER_ARGS`` (extra ``serve`` options), if it has any."""
    return broker_factory(*getattr(request.module, "BROKER_ARGS", ()))


@pytest.fixture
def broker(module_broker: Broker, request: pytest.FixtureRequest) -> Iterator[Broker]:
    """The module's server; the test fails if the server logs a Traceback or dies."""
    check_log(module_broker, 0, "an earlier test or start-up")
    start = module_broker.stderr_size()
    yield module_broker
    check_log(module_broker, start, request.node.name)


_topic_counter = itertools.count()


@pytest.fixture(autouse=True)
def client_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The Python clients' warnings and errors, shown by pytest when a test fails."""
    for logger in ("kafka", "aiokafka"):
        caplog.set_level(logging.WARNING, logger=logger)
    return caplog


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique, valid topic names derived from the test's name: topic_name("a") etc."""
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name).strip("-")[:150]

    def make(suffix: str = "") -> str:
        return f"{base}-{suffix}-{os.getpid()}-{next(_topic_counter)}".replace("--", "-")

    return make


@pytest.fixture
def client(request: pytest.FixtureRequest, broker: Broker) -> Client:
    """The adapter of the client library the test is parametrized with (indirectly: see
    tests.wire.clients.params), on the module's server."""
    return make(request.param, broker)
