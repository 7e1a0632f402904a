"""One Jepsen-style run: start a topology, run the workload while the nemesis injects
faults, heal, let the clients finish, read every partition back from the earliest offset,
write history.jsonl and result.json into the run's directory, and check the history.

Used by tests/jepsen/test_jepsen.py (a short run) and scripts/jepsen.py (long ones).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.jepsen import history as history_io
from tests.jepsen.checker import check
from tests.jepsen.history import INVOKE, OK, History
from tests.jepsen.nemesis import Nemesis
from tests.jepsen.topology import make
from tests.jepsen.workload import CLIENT_LOG, Workload, WorkloadSettings

LOG = logging.getLogger("kafkaesque.jepsen")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class RunSettings:
    topology: str = "single"
    seconds: float = 60.0  # of load with faults
    seed: int = 0
    faults: tuple[str, ...] | None = None  # None: every fault of the topology
    gap: tuple[float, float] = (2.0, 5.0)  # seconds between faults
    quiet: float = 3.0  # seconds of load after the last fault, before the workload stops
    allowed: tuple[str, ...] = ()  # anomaly kinds that do not make the run invalid
    workload: WorkloadSettings = field(default_factory=WorkloadSettings)


def run(directory: Path, settings: RunSettings, progress: Progress = lambda line: None) -> dict:
    """The result of checking the run's history (see checker.check), with the run's
    figures under ``"run"``."""
    directory.mkdir(parents=True, exist_ok=True)
    client_log = logging.FileHandler(directory / "clients.log")
    client_log.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(message)s"))
    CLIENT_LOG.addHandler(client_log)
    CLIENT_LOG.setLevel(logging.DEBUG if settings.workload.client_debug else logging.INFO)
    CLIENT_LOG.propagate = False
    try:
        return _run(directory, settings, progress)
    finally:
        CLIENT_LOG.removeHandler(client_log)
        client_log.close()


def _run(directory: Path, settings: RunSettings, progress: Progress) -> dict:
    began = time.monotonic()
    history = History()
    topology = make(settings.topology, directory, settings.workload.partitions)
    problems: list[str] = []
    try:
        progress(f"starting {settings.topology}")
        topology.start()
        workload = Workload(topology.bootstrap, history, settings.workload, settings.seed)
        nemesis = Nemesis(topology, history, settings.seed, settings.faults, settings.gap)
        workload.start()
        try:
            _wait_for(lambda: _acks(history) > 0, 60, "a first acknowledged send")
            nemesis.start()
            deadline = time.monotonic() + settings.seconds
            while time.monotonic() < deadline:
                time.sleep(1.0)
                progress(_status(history, nemesis, time.monotonic() - began))
        finally:
            nemesis.finish()
            time.sleep(settings.quiet)
            progress("stopping the workload")
            workload.stop()
        problems += [f"worker still running: {name}" for name in workload.alive()]
        problems += workload.errors() + nemesis.errors
        progress("final read of every partition from the earliest offset")
        missing = workload.final_read()
        if missing:
            problems.append(f"the final read did not reach the end of partitions {missing}")
        tracebacks = topology.tracebacks()
    finally:
        topology.close()
    ops = history.snapshot()
    history_io.write(ops, directory / "history.jsonl")
    result = check(ops, allowed=settings.allowed)
    result["run"] = {
        "settings": asdict(settings),
        "seconds": round(time.monotonic() - began, 1),
        "faults": dict(nemesis.injected),
        "client-crashes": workload.crashes(),
        "problems": problems,
        "tracebacks": tracebacks[:5],
        "tracebacks-count": len(tracebacks),
        "directory": str(directory),
    }
    if problems:
        result["valid?"] = False
    (directory / "result.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    return result


def _acks(history: History) -> int:
    return sum(1 for op in history.ops if op.type == OK and op.f == "send")


def _status(history: History, nemesis: Nemesis, elapsed: float) -> str:
    ops = history.snapshot()
    invoked = sum(1 for op in ops if op.type == INVOKE and op.process != "nemesis")
    acked = sum(1 for op in ops if op.type == OK and op.f in ("send", "txn"))
    faults = sum(nemesis.injected.values())
    last = next((op.f for op in reversed(ops) if op.process == "nemesis"), "-")
    return f"{elapsed:6.1f} s  ops {invoked:7d}  acked {acked:7d}  faults {faults:3d}  ({last})"


def _wait_for(condition: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)
