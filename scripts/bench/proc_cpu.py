"""CPU seconds of processes from /proc, for the benchmarks' "CPU per million records":
the broker's, Redis' and the client's (this process: librdkafka's threads included) over
one measured phase, so each figure says where the cores went, not only how fast it was."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def self_cpu() -> float:
    """This process' CPU seconds (all its threads)."""
    times = os.times()
    return times.user + times.system


@dataclass
class Phase:
    """CPU seconds each named process spent during one ``measure`` block."""

    seconds: dict[str, float] = field(default_factory=dict)

    def per_million(self, records: int) -> dict[str, float]:
        return {name: s / records * 1e6 for name, s in self.seconds.items()}

    def line(self, records: int) -> str:
        """ "broker 0.21  redis 0.27  client 0.90 s of CPU per million records"."""
        parts = [f"{name} {s:.2f}" for name, s in self.per_million(records).items()]
        return "  ".join(parts) + " s of CPU per million records"


@contextmanager
def measure(pids: dict[str, int | None]) -> Iterator[Phase]:
    """CPU of the processes named by pid (None: this process) over the block."""

    def now() -> dict[str, float]:
        return {n: self_cpu() if p is None else cpu_seconds(p) for n, p in pids.items()}

    phase = Phase()
    before = now()
    yield phase
    after = now()
    phase.seconds = {name: after[name] - before[name] for name in pids}
