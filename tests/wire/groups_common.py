"""Consumer group members as subprocesses, for the group tests (tests/wire/test_groups_*.py).

A member (``MemberProcess``) is a confluent-kafka, kafka-python or aiokafka consumer run by
tests/wire/group_member.py, or a kafkajs one run by tests/wire/js/kafkajs_group.js,
subscribed to one topic. It reports on stdout, one JSON object a line, its
``assignment()`` whenever it changes, its rebalance callbacks and every record it consumed
(before committing it); it subscribes when it reads ``go`` on stdin (so several members
join one round), and closes the consumer on ``stop`` or SIGTERM. SIGKILL is a member that
dies without LeaveGroup. Processes, not threads: a member killed must take its connections
and heartbeats with it, and librdkafka and kafka-python each keep threads of their own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.wire.clients import JS
from tests.wire.common import TIMEOUT, wait_until
from tests.wire.group_member import HEARTBEAT_MS, SESSION_MS

REPO = Path(__file__).resolve().parents[2]


def member_command(options: dict) -> list[str]:
    """kafkajs members run tests/wire/js/kafkajs_group.js, the others group_member.py."""
    if options["client"] == "kafkajs":
        return ["node", str(JS / "kafkajs_group.js"), json.dumps(options)]
    return [sys.executable, "-m", "tests.wire.group_member", json.dumps(options)]


class MemberProcess:
    """One consumer of a group in its own process (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        name: str,
        client: str,
        bootstrap: str,
        topic: str,
        group: str,
        *,
        strategy: str = "range",
        commit: str = "sync",
        session_ms: int = SESSION_MS,
        heartbeat_ms: int = HEARTBEAT_MS,
        instance_id: str | None = None,
        max_records: int = 500,
        wait_go: bool = True,
        extra: dict | None = None,
    ) -> None:
        self.name = name
        self.options = {
            "client": client,
            "bootstrap": bootstrap,
            "topic": topic,
            "group": group,
            "client_id": f"{client}-{name}",
            "strategy": strategy,
            "commit": commit,
            "session_ms": session_ms,
            "heartbeat_ms": heartbeat_ms,
            "instance_id": instance_id,
            "max_records": max_records,
            "wait_go": wait_go,
            "extra": extra or {},
        }
        directory.mkdir(parents=True, exist_ok=True)
        self.stderr_path = directory / f"member-{name}.stderr"
        self.lock = threading.Lock()
        self.events: list[dict] = []
        self.records: list[tuple[int, int, str]] = []  # partition, offset, value
        self.assignment: list[int] | None = None  # the last assignment() reported
        self.assignments: list[tuple[float, list[int]]] = []  # (time, assignment) changes
        self.errors: list[str] = []
        self.ready = threading.Event()
        self.closed = threading.Event()
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                member_command(self.options),
                cwd=REPO,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.reader = threading.Thread(target=self._read, daemon=True, name=f"member-{name}")
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:  # a line cut short by SIGKILL
                continue
            with self.lock:
                self.events.append(event)
                kind = event["ev"]
                if kind == "records":
                    self.records.extend((p, o, v) for p, o, v in event["items"])
                elif kind == "assignment":
                    self.assignment = event["partitions"]
                    self.assignments.append((event["t"], event["partitions"]))
                elif kind == "error":
                    self.errors.append(event["what"])
            if kind == "ready":
                self.ready.set()
            elif kind == "closed":
                self.closed.set()

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def go(self) -> None:
        self.send("go")

    def wait_ready(self, timeout: float = TIMEOUT) -> None:
        wait_until(
            lambda: self.ready.is_set() or self.proc.poll() is not None,
            f"member {self.name} to start",
            timeout,
            self.describe,
        )
        assert self.ready.is_set(), f"member {self.name} exited:\n{self.describe()}"

    def stop(self, timeout: float = 20.0) -> int:
        """Close the consumer (LeaveGroup, unless static) and wait for the process."""
        if self.proc.poll() is None:
            self.send("stop")
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(5)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: the consumer dies without leaving its group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.reader.join(5)

    def values(self) -> list[str]:
        with self.lock:
            return [v for _, _, v in self.records]

    def current(self) -> list[int] | None:
        with self.lock:
            return None if self.assignment is None else list(self.assignment)

    def callbacks(self) -> list[tuple[str, list[int]]]:
        with self.lock:
            return [
                (e["ev"], e["partitions"]) for e in self.events if e["ev"] in ("assign", "revoke")
            ]

    def log(self, tail: int = 60) -> str:
        try:
            lines = self.stderr_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-tail:])

    def describe(self) -> str:
        with self.lock:
            assignment, n, errors = self.assignment, len(self.records), self.errors[-10:]
        status = self.proc.poll()
        return (
            f"--- member {self.name} (exit {status}): assignment {assignment}, "
            f"{n} records, errors {errors}\n{self.log()}"
        )


def describe_members(members: Iterable[MemberProcess]) -> str:
    return "\n".join(m.describe() for m in members)


def start_members(
    directory: Path, names: Iterable[str], *args: Any, go: bool = True, **options: Any
) -> list[MemberProcess]:
    """Start members, wait until each has its consumer built, then let them all subscribe at
    once (so they usually join one round)."""
    members = [MemberProcess(directory, name, *args, **options) for name in names]
    try:
        for m in members:
            m.wait_ready()
        if go:
            for m in members:
                m.go()
    except BaseException:
        for m in members:
            m.kill()
        raise
    return members


def split_ok(assignments: list[list[int] | None], partitions: int, balanced: bool = True) -> bool:
    """Every member has partitions, none is shared, together they are all of them (and
    with ``balanced``, the members' counts differ by one at most)."""
    if any(not a for a in assignments):
        return False
    flat = [p for a in assignments for p in a or ()]
    sizes = [len(a or ()) for a in assignments]
    return (
        len(flat) == len(set(flat))
        and set(flat) == set(range(partitions))
        and (not balanced or max(sizes) - min(sizes) <= 1)
    )


def wait_for_split(
    members: list[MemberProcess], partitions: int, timeout: float = TIMEOUT, balanced: bool = True
) -> list[list[int]]:
    """Wait until the members' assignments split all partitions; returns them."""
    wait_until(
        lambda: split_ok([m.current() for m in members], partitions, balanced),
        f"{len(members)} members to share {partitions} partitions",
        timeout,
        lambda: describe_members(members),
    )
    return [sorted(m.current() or ()) for m in members]


def stop_all(members: Iterable[MemberProcess]) -> None:
    members = list(members)
    for m in members:
        if m.proc.poll() is None:
            m.send("stop")
    for m in members:
        m.stop()
