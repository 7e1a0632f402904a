"""Shared helpers of the consumer group tests (tests/wire/test_groups_*.py).

* Group members as subprocesses (``MemberProcess``): confluent-kafka, kafka-python or
  aiokafka consumers subscribed to one topic, run by this module's ``__main__`` (``python -m
  tests.wire.groups_common JSON``). A member reports on stdout, one JSON object a line, its
  ``assignment()`` whenever it changes, its rebalance callbacks and every record it consumed
  (before committing it); it subscribes when it reads ``go`` on stdin (so several members
  join one round), and closes the consumer on ``stop`` or SIGTERM. SIGKILL is a member
  that dies without LeaveGroup.
* Producing numbered records fast over a raw connection (the client under test is not
  needed for that): record i of a topic has the value ``r-<i>``.
* The tests' own consumers: their records as (partition, offset, value), and the scenarios
  every client runs (``check_*``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkaesque.records import build_batch
from tests.kafka_client import Connection

REPO = Path(__file__).resolve().parents[2]
# serve options that make group tests fast: a new group waits 200 ms for more members,
# and members may ask for session timeouts from 1 s.
FAST_GROUP_ARGS = (
    "--group-initial-rebalance-delay-ms",
    "200",
    "--group-min-session-timeout-ms",
    "1000",
)
SESSION_MS = 2000  # members' session timeout in most tests
HEARTBEAT_MS = 250
TIMEOUT = 30.0


def value_of(i: int) -> str:
    return f"r-{i:08d}"


# -- waiting ---------------------------------------------------------------------------------


def wait_until(
    condition: Callable[[], Any],
    what: str,
    timeout: float = TIMEOUT,
    context: Callable[[], str] = lambda: "",
    interval: float = 0.05,
) -> Any:
    """Poll ``condition`` until it returns something true; fail with ``context()``."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{context()}")
        time.sleep(interval)


# -- producing -------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    with Connection(bootstrap) as conn:
        result = conn.create_topic(topic, partitions)
        assert result.error_code == ErrorCode.none, result


def produce_numbered(
    bootstrap: str, topic: str, partitions: int, start: int, count: int, batch: int = 500
) -> dict[int, int]:
    """Records ``value_of(i)`` for i in [start, start + count), record i to partition
    i % partitions, in batches of up to ``batch`` records. Returns partition -> log end."""
    per_partition: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for i in range(start, start + count):
        per_partition[i % partitions].append(value_of(i).encode())
    ends = {}
    with Connection(bootstrap) as conn:
        for p, values in per_partition.items():
            for k in range(0, len(values), batch):
                resp = conn.produce(topic, p, build_batch(values[k : k + batch]))
                assert resp.error_code == ErrorCode.none, resp
            ends[p] = conn.list_offset(topic, p, -1).offset
    return ends


# -- consuming -------------------------------------------------------------------------------

Record = tuple[int, int, str]  # a consumed record: partition, offset, value


def records_of(batch: dict[Any, list[Any]]) -> list[Record]:
    """The records of a kafka-python or aiokafka poll (topic partition -> messages)."""
    return [(m.partition, m.offset, m.value.decode()) for ms in batch.values() for m in ms]


def positions_after(records: Iterable[Record]) -> dict[int, int]:
    """partition -> offset after the last of ``records`` on it."""
    out: dict[int, int] = {}
    for p, offset, _ in records:
        out[p] = max(out.get(p, 0), offset + 1)
    return out


class Collector:
    """Records consumed a poll at a time, until ``count`` came or ``timeout`` passed."""

    def __init__(self, count: int, timeout: float = TIMEOUT) -> None:
        self.count = count
        self.records: list[Record] = []
        self.deadline = time.monotonic() + timeout

    def wanted(self) -> int:
        """How many records the next poll may return (500 at most); 0 when done."""
        left = self.count - len(self.records)
        if left <= 0 or time.monotonic() >= self.deadline:
            return 0
        return min(500, left)

    def result(self, context: str = "") -> list[Record]:
        """The records; fails unless exactly ``count`` came."""
        got = len(self.records)
        assert got == self.count, f"got {got} of {self.count} records{context}"
        return self.records


def kafka_python_options(
    bootstrap: str,
    group: str,
    client_id: str,
    *,
    session_ms: int = SESSION_MS,
    heartbeat_ms: int = HEARTBEAT_MS,
    **options: Any,
) -> dict[str, Any]:
    """Keyword arguments of kafka-python's KafkaConsumer and aiokafka's AIOKafkaConsumer
    (their names are the same): from the earliest offset, no auto commit, short fetch waits;
    ``options`` add to them or replace them."""
    return {
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "client_id": client_id,
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "session_timeout_ms": session_ms,
        "heartbeat_interval_ms": heartbeat_ms,
        "fetch_max_wait_ms": 100,
        "request_timeout_ms": int(TIMEOUT * 1000),
        **options,
    }


# -- member processes -----------------------------------------------------------------------


JS = Path(__file__).resolve().parent / "js"
# the Python module each client's members import
CLIENT_MODULES = {"confluent": "confluent_kafka", "kafka-python": "kafka", "aiokafka": "aiokafka"}


def needs(client: str) -> list[pytest.MarkDecorator]:
    """Marks that skip a test whose member client is not installed (none when it is)."""
    if client == "kafkajs":
        if shutil.which("node") is None:
            return [pytest.mark.skip(reason="Node.js is not installed")]
        if not (JS / "node_modules" / "kafkajs").is_dir():
            return [pytest.mark.skip(reason="no kafkajs: npm ci --prefix tests/wire/js")]
    elif importlib.util.find_spec(CLIENT_MODULES[client]) is None:
        return [pytest.mark.skip(reason=f"{CLIENT_MODULES[client]} is not installed")]
    return []


def member_command(options: dict) -> list[str]:
    """kafkajs members run tests/wire/js/kafkajs_group.js, the others this module."""
    if options["client"] == "kafkajs":
        return ["node", str(JS / "kafkajs_group.js"), json.dumps(options)]
    return [sys.executable, "-m", "tests.wire.groups_common", json.dumps(options)]


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


# -- the group as the server sees it -------------------------------------------------------


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets of the topic's partitions (-1: none)."""
    with Connection(bootstrap) as conn:
        fetched = conn.offset_fetch(group, {topic: list(range(partitions))})
    return {p: offset for (_, p), (offset, _, _) in fetched.items()}


def wait_committed(
    bootstrap: str, group: str, topic: str, partitions: int, ends: dict[int, int]
) -> None:
    """Wait until the group's committed offsets of the topic's partitions are ``ends``."""
    wait_until(
        lambda: committed(bootstrap, group, topic, partitions) == ends,
        f"committed offsets {ends}",
        context=lambda: str(committed(bootstrap, group, topic, partitions)),
    )


def cli_group(broker: Any, group: str) -> dict:
    """``kafkaesque group GROUP`` parsed: state, generation, members, and per partition
    (topic, partition) -> (committed, end, lag) as strings."""
    text = broker.cli("group", group).stdout.decode()
    out: dict[str, Any] = {"text": text, "rows": {}, "member_lines": []}
    lines = text.splitlines()
    in_rows = False
    for line in lines:
        if line.split()[:2] == ["topic", "partition"]:
            in_rows = True
            continue
        if in_rows:
            t, p, c, end, lag, _member = line.split()
            out["rows"][t, int(p)] = (c, end, lag)
        elif line.startswith("  "):
            out["member_lines"].append(line.strip())
        else:
            key, _, value = line.partition(" ")
            out[key] = value.strip()
    return out


# -- scenarios every client runs ------------------------------------------------------------


def check_split_exactly_once(
    broker: Any,
    directory: Path,
    topic: str,
    group: str,
    client: str,
    strategy: str,
    records: int = 30_000,
    partitions: int = 6,
) -> None:
    """Three members share the partitions without overlap; records produced while the group
    is stable are each consumed exactly once, by the member owning their partition."""
    create_topic(broker.bootstrap, topic, partitions)
    members = start_members(
        directory, ["a", "b", "c"], client, broker.bootstrap, topic, group, strategy=strategy
    )
    try:
        split = wait_for_split(members, partitions)
        assert sorted(len(s) for s in split) == [2, 2, 2], split
        with Connection(broker.bootstrap) as conn:
            described = conn.describe_group(group)
        assert described.group_state == "Stable", described
        assert described.protocol_type == "consumer" and described.protocol_data == strategy
        assert len(described.members) == 3, described
        ends = produce_numbered(broker.bootstrap, topic, partitions, 0, records)
        wait_until(
            lambda: sum(len(m.records) for m in members) >= records,
            f"{records} records",
            context=lambda: describe_members(members),
        )
        time.sleep(0.5)  # anything extra (a duplicate) would arrive now
        for m, parts in zip(members, split, strict=True):
            assert m.current() == parts, f"{m.name} was reassigned:\n{describe_members(members)}"
            assert {p for p, _, _ in m.records} <= set(parts), m.name
            assert not m.errors, m.describe()
        consumed = [v for m in members for v in m.values()]
        assert len(consumed) == records, f"{len(consumed) - records} duplicates"
        assert set(consumed) == {value_of(i) for i in range(records)}
        # Each member committed what it consumed.
        wait_committed(broker.bootstrap, group, topic, partitions, ends)
    finally:
        stop_all(members)
    assert [m.proc.returncode for m in members] == [0, 0, 0], describe_members(members)
    # They all left: the group is empty, its offsets stay.
    with Connection(broker.bootstrap) as conn:
        described = conn.describe_group(group)
    assert described.group_state == "Empty" and not described.members, described
    assert committed(broker.bootstrap, group, topic, partitions) == ends


def check_killed_member(
    broker: Any,
    directory: Path,
    topic: str,
    group: str,
    client: str,
    strategy: str = "range",
    records: int = 6000,
    partitions: int = 6,
) -> None:
    """A member SIGKILLed (no LeaveGroup) is expelled after its session timeout, not
    before; its partitions move to the survivors, and with commits after every batch each
    record is consumed at least once."""
    create_topic(broker.bootstrap, topic, partitions)
    members = start_members(
        directory, ["a", "b", "c"], client, broker.bootstrap, topic, group, strategy=strategy
    )
    try:
        wait_for_split(members, partitions)
        half = records // 2
        produce_numbered(broker.bootstrap, topic, partitions, 0, half)
        wait_until(
            lambda: {v for m in members for v in m.values()} >= {value_of(i) for i in range(half)},
            "the first half to be consumed",
            context=lambda: describe_members(members),
        )
        victim, survivors = members[0], members[1:]
        taken = set(victim.current() or ())
        assert victim.records, victim.describe()  # it was consuming when it died
        killed = time.monotonic()
        victim.kill()
        ends = produce_numbered(broker.bootstrap, topic, partitions, half, records - half)
        # Until the session times out the group keeps the dead member.
        time.sleep(0.5)
        with Connection(broker.bootstrap) as conn:
            assert len(conn.describe_group(group).members) == 3
        after = wait_for_split(survivors, partitions, timeout=SESSION_MS / 1000 + TIMEOUT)
        moved = time.monotonic() - killed
        assert moved >= SESSION_MS / 1000 - 0.5, f"expelled after {moved:.2f} s"
        assert taken <= set(after[0]) | set(after[1])
        with Connection(broker.bootstrap) as conn:
            described = conn.describe_group(group)
        assert described.group_state == "Stable" and len(described.members) == 2, described
        everything = {value_of(i) for i in range(records)}
        wait_until(
            lambda: {v for m in members for v in m.values()} >= everything,
            "every record to be consumed at least once",
            context=lambda: describe_members(members),
        )
        # The survivors read the victim's partitions on from where it had committed.
        taken_values = {v for m in survivors for p, _, v in m.records if p in taken}
        assert {value_of(i) for i in range(half, records) if i % partitions in taken} <= (
            taken_values
        )
        wait_committed(broker.bootstrap, group, topic, partitions, ends)
    finally:
        stop_all(members)
    assert [m.proc.returncode for m in members[1:]] == [0, 0], describe_members(members)


def check_restart_resumes(
    bootstrap: str,
    topic: str,
    consume_and_commit: Callable[[int], tuple[list[Record], dict[int, int]]],
    consume_rest: Callable[[int], list[Record]],
    partitions: int = 3,
    total: int = 3000,
) -> None:
    """A consumer reads half of ``total`` records and commits the positions after them;
    another of its group, started after it closed, reads exactly the rest, each partition
    from its committed offset.

    ``consume_and_commit(count)`` returns the records and the committed offsets as it reads
    them back; ``consume_rest(count)`` returns the records and checks that no more come."""
    create_topic(bootstrap, topic, partitions)
    produce_numbered(bootstrap, topic, partitions, 0, total)
    half, stored = consume_and_commit(total // 2)
    positions = positions_after(half)
    assert stored == positions, (stored, positions)
    rest = consume_rest(total - len(half))
    before = {v for _, _, v in half}
    after = [v for _, _, v in rest]
    assert not before & set(after), "records consumed again after the restart"
    assert before | set(after) == {value_of(i) for i in range(total)}
    assert len(after) == len(set(after))
    # Each partition resumed exactly at its committed offset.
    for p in range(partitions):
        offsets = [offset for q, offset, _ in rest if q == p]
        if offsets:
            assert min(offsets) == positions.get(p, 0), (p, positions)


@contextlib.contextmanager
def two_committed_members(
    broker: Any,
    directory: Path,
    topic: str,
    group: str,
    client: str,
    partitions: int = 3,
    records: int = 300,
) -> Iterator[tuple[list[list[int]], dict[int, int]]]:
    """Members "a" and "b" of ``client`` sharing a new topic of ``records`` records, once
    they have committed all of them: yields their split and the partitions' log ends, and
    stops the members on leaving."""
    create_topic(broker.bootstrap, topic, partitions)
    ends = produce_numbered(broker.bootstrap, topic, partitions, 0, records)
    members = start_members(directory, ["a", "b"], client, broker.bootstrap, topic, group)
    try:
        split = wait_for_split(members, partitions)
        wait_committed(broker.bootstrap, group, topic, partitions, ends)
        yield split, ends
    finally:
        stop_all(members)


# -- the member process itself --------------------------------------------------------------


class _Out:
    def __init__(self) -> None:
        self.lock = threading.Lock()

    def emit(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"ev": kind, "t": time.time(), **fields})
        with self.lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


class _Control:
    """stdin commands (go, stop) and SIGTERM."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: self.stop.set())
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            command = line.strip()
            if command == "go":
                self.go.set()
            elif command == "stop":
                self.stop.set()
                self.go.set()
        self.stop.set()  # the test process is gone
        self.go.set()

    def started(self, out: _Out) -> bool:
        """Report the consumer built, wait for go; False when told to stop before."""
        out.emit("ready")
        self.go.wait()
        return not self.stop.is_set()


class _Reporter:
    """What a member reports of its consumer: rebalance callbacks, assignment() changes and
    consumed records."""

    def __init__(self, out: _Out, consumer: Any, commit: str) -> None:
        self.out = out
        self.consumer = consumer
        self.sync_commit = commit == "sync"
        self.last: list[int] | None = None

    def callback(self, kind: str, partitions: Iterable[Any]) -> None:
        """A rebalance callback (assign, revoke, lost) with its topic partitions."""
        self.out.emit(kind, partitions=sorted(tp.partition for tp in partitions))

    def assignment(self) -> None:
        """The consumer's assignment(), when it changed since the last report."""
        now = sorted(tp.partition for tp in self.consumer.assignment())
        if now != self.last:
            self.last = now
            self.out.emit("assignment", partitions=now)

    def records(self, items: list[Record]) -> bool:
        """Consumed records, if any; True when they are to be committed now."""
        if not items:
            return False
        self.out.emit("records", items=items)
        return self.sync_commit


def _member_confluent(o: dict, out: _Out, control: _Control) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException

    config = {
        "bootstrap.servers": o["bootstrap"],
        "group.id": o["group"],
        "client.id": o["client_id"],
        "broker.address.family": "v4",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": o["commit"] == "auto",
        "auto.commit.interval.ms": 200,
        "session.timeout.ms": o["session_ms"],
        "heartbeat.interval.ms": o["heartbeat_ms"],
        "partition.assignment.strategy": o["strategy"],
        "fetch.wait.max.ms": 100,
        "error_cb": lambda err: out.emit("error", what=f"error_cb: {err}"),
        **o["extra"],
    }
    if o["instance_id"]:
        config["group.instance.id"] = o["instance_id"]
    consumer = Consumer(config)
    if control.started(out):
        reporter = _Reporter(out, consumer, o["commit"])

        def commit() -> None:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._NO_OFFSET:
                    out.emit("commit_error", what=str(exc))

        def on_assign(c, partitions) -> None:
            reporter.callback("assign", partitions)
            reporter.assignment()

        def on_revoke(c, partitions) -> None:
            reporter.callback("revoke", partitions)
            if reporter.sync_commit:
                commit()

        def on_lost(c, partitions) -> None:
            reporter.callback("lost", partitions)

        consumer.subscribe([o["topic"]], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        out.emit("subscribed")
        while not control.stop.is_set():
            items = []
            for msg in consumer.consume(o["max_records"], 0.1):
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        out.emit("error", what=f"message error: {msg.error()}")
                    continue
                items.append((msg.partition(), msg.offset(), msg.value().decode()))
            if reporter.records(items):
                commit()
            reporter.assignment()
    consumer.close()
    out.emit("closed")


# the assignors of kafka-python and aiokafka: strategy -> (module in
# <package>.coordinator.assignors, class)
_ASSIGNORS = {
    "range": ("range", "RangePartitionAssignor"),
    "roundrobin": ("roundrobin", "RoundRobinPartitionAssignor"),
    "sticky": ("sticky.sticky_assignor", "StickyPartitionAssignor"),
}


def _kafka_python_member_options(o: dict, package: str) -> dict[str, Any]:
    """A member's KafkaConsumer (``package`` kafka) or AIOKafkaConsumer (aiokafka) options."""
    module, name = _ASSIGNORS[o["strategy"]]
    assignor = getattr(importlib.import_module(f"{package}.coordinator.assignors.{module}"), name)
    return kafka_python_options(
        o["bootstrap"],
        o["group"],
        o["client_id"],
        session_ms=o["session_ms"],
        heartbeat_ms=o["heartbeat_ms"],
        enable_auto_commit=o["commit"] == "auto",
        auto_commit_interval_ms=200,
        partition_assignment_strategy=(assignor,),
        group_instance_id=o["instance_id"],
        **o["extra"],
    )


def _member_kafka_python(o: dict, out: _Out, control: _Control) -> None:
    import logging

    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.errors import KafkaError

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    consumer = KafkaConsumer(**_kafka_python_member_options(o, "kafka"))
    if control.started(out):
        reporter = _Reporter(out, consumer, o["commit"])

        def commit() -> None:
            try:
                consumer.commit()
            except KafkaError as exc:
                out.emit("commit_error", what=repr(exc))

        class Listener(ConsumerRebalanceListener):
            # kafka-python 3 runs listeners on its IO thread, where commit() cannot block;
            # offsets are committed after every batch anyway.
            def on_partitions_revoked(self, revoked) -> None:
                reporter.callback("revoke", revoked)

            def on_partitions_assigned(self, assigned) -> None:
                reporter.callback("assign", assigned)
                reporter.assignment()

        consumer.subscribe([o["topic"]], listener=Listener())
        out.emit("subscribed")
        while not control.stop.is_set():
            batch = consumer.poll(timeout_ms=100, max_records=o["max_records"])
            if reporter.records(records_of(batch)):
                commit()
            reporter.assignment()
    consumer.close()
    out.emit("closed")


def _member_aiokafka(o: dict, out: _Out, control: _Control) -> None:
    import asyncio
    import logging

    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.errors import KafkaError

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    async def main() -> None:
        consumer = AIOKafkaConsumer(**_kafka_python_member_options(o, "aiokafka"))
        reporter = _Reporter(out, consumer, o["commit"])

        async def commit() -> None:
            try:
                await consumer.commit()
            except KafkaError as exc:
                out.emit("commit_error", what=repr(exc))

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked) -> None:
                reporter.callback("revoke", revoked)
                if reporter.sync_commit and revoked:
                    await commit()

            async def on_partitions_assigned(self, assigned) -> None:
                reporter.callback("assign", assigned)
                reporter.assignment()

        if not await asyncio.get_running_loop().run_in_executor(None, control.started, out):
            out.emit("closed")
            return
        consumer.subscribe([o["topic"]], listener=Listener())
        await consumer.start()
        out.emit("subscribed")
        try:
            while not control.stop.is_set():
                batch = await consumer.getmany(timeout_ms=100, max_records=o["max_records"])
                if reporter.records(records_of(batch)):
                    await commit()
                reporter.assignment()
        finally:
            await consumer.stop()
        out.emit("closed")

    asyncio.run(main())


MEMBERS = {
    "confluent": _member_confluent,
    "kafka-python": _member_kafka_python,
    "aiokafka": _member_aiokafka,
}


if __name__ == "__main__":
    options = json.loads(sys.argv[1])
    control = _Control()
    if not options["wait_go"]:
        control.go.set()
    MEMBERS[options["client"]](options, _Out(), control)
