"""The history of a Jepsen-style run: every operation's invocation and completion, in the
shape of Jepsen's Kafka workload (jepsen.tests.kafka), one JSON object per line.

An operation is ``{index, time, process, type, f, value}``:

- ``type``: ``invoke`` when a client starts it, then one completion by the same process:
  ``ok`` (it happened), ``fail`` (it certainly did not: an aborted transaction) or ``info``
  (unknown: a timeout, a lost connection, a client that had to be replaced). A process
  runs one operation at a time; a process whose operation ended ``info`` is never used
  again (its client is thrown away and a new process number takes over).
- ``f``: ``send``, ``poll`` or ``txn`` (a list of micro-ops), ``assign`` / ``subscribe``
  (what a consumer reads from changed: the checker forgets where it was), ``crash``,
  ``final-read`` (value: the partitions the final read got from the earliest offset to
  the end; its polls are marked ``final``).
  The nemesis (process ``"nemesis"``) logs its faults as ``info`` ops with its own ``f``.
- ``value`` (sends, polls, txns): micro-ops ``["send", k, v]`` on invocation and
  ``["send", k, [offset, v]]`` once acknowledged; ``["poll"]`` on invocation and
  ``["poll", {k: [[offset, v], ...]}]`` once done. A key ``k`` is a partition; values are
  unique integers.

``time`` is nanoseconds since the start of the run. Keys are partitions (ints) in Python;
JSON turns map keys into strings, ``read`` turns them back.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INVOKE, OK, INFO, FAIL = "invoke", "ok", "info", "fail"
NEMESIS = "nemesis"

# A micro-op as a list: ["send", key, value | [offset, value]] or ["poll", {key: [[o, v]]}].
MicroOp = list[Any]


@dataclass
class Op:
    process: int | str
    type: str
    f: str
    value: Any = None
    time: int = 0
    index: int = -1
    error: str | None = None
    final: bool = False  # part of the final full read of every partition

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "time": self.time,
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "value": self.value,
        }
        if self.error is not None:
            out["error"] = self.error
        if self.final:
            out["final"] = True
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Op:
        return cls(
            process=data["process"],
            type=data["type"],
            f=data["f"],
            value=_keys_to_int(data.get("value")),
            time=data.get("time", 0),
            index=data.get("index", -1),
            error=data.get("error"),
            final=data.get("final", False),
        )

    # --- micro-op views (completions) ---------------------------------------------------

    def sends(self) -> Iterator[tuple[int, int | None, int]]:
        """(key, offset or None, value) of each send micro-op, in order."""
        if self.f not in ("send", "txn") or not isinstance(self.value, list):
            return
        for mop in self.value:
            if mop[0] != "send":
                continue
            _, key, v = mop
            if isinstance(v, list):
                yield key, v[0], v[1]
            else:
                yield key, None, v

    def polls(self) -> Iterator[dict[int, list[list[int]]]]:
        """Each poll micro-op's {key: [[offset, value], ...]}, in order."""
        if self.f not in ("poll", "txn") or not isinstance(self.value, list):
            return
        for mop in self.value:
            if mop[0] == "poll" and len(mop) > 1 and mop[1]:
                yield mop[1]


def _keys_to_int(value: Any) -> Any:
    """Poll maps come back from JSON with string keys: partitions are ints."""
    if isinstance(value, list):
        return [_keys_to_int(v) for v in value]
    if isinstance(value, dict):
        return {
            (int(k) if isinstance(k, str) and k.lstrip("-").isdigit() else k): v
            for k, v in value.items()
        }
    return value


@dataclass
class History:
    """A thread-safe, append-only history; ``append`` stamps index and time."""

    ops: list[Op] = field(default_factory=list)
    started: int = field(default_factory=time.monotonic_ns)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def append(self, op: Op) -> Op:
        with self._lock:
            op.index = len(self.ops)
            op.time = time.monotonic_ns() - self.started
            self.ops.append(op)
        return op

    def invoke(self, process: int | str, f: str, value: Any = None, final: bool = False) -> Op:
        return self.append(Op(process, INVOKE, f, value, final=final))

    def complete(
        self,
        invocation: Op,
        type: str,
        value: Any = None,
        error: str | None = None,
    ) -> Op:
        """The completion of ``invocation`` (its value if none is given)."""
        if value is None:
            value = invocation.value
        op = Op(invocation.process, type, invocation.f, value, error=error, final=invocation.final)
        return self.append(op)

    def snapshot(self) -> list[Op]:
        with self._lock:
            return list(self.ops)

    def __len__(self) -> int:
        return len(self.ops)


def write(ops: Iterable[Op], path: Path) -> None:
    """JSON lines, one op each."""
    with path.open("w") as out:
        for op in ops:
            out.write(json.dumps(op.to_json(), separators=(",", ":")) + "\n")


def read(path: Path) -> list[Op]:
    with path.open() as lines:
        return [Op.from_json(json.loads(line)) for line in lines if line.strip()]


def pairs(ops: Iterable[Op]) -> Iterator[tuple[Op, Op | None]]:
    """Each invocation with its completion (None: never completed), in invocation order.
    A process runs one op at a time, except that a subscribed consumer's rebalance
    (logged as ``assign``) happens inside its poll: a completion belongs to its process'
    last invocation of the same ``f``."""
    pending: dict[tuple[int | str, str], Op] = {}
    out: list[list[Op | None]] = []
    slots: dict[int, list[Op | None]] = {}
    for op in ops:
        if op.type == INVOKE:
            pending[(op.process, op.f)] = op
            slot: list[Op | None] = [op, None]
            slots[id(op)] = slot
            out.append(slot)
        else:
            invocation = pending.pop((op.process, op.f), None)
            if invocation is not None:
                slots[id(invocation)][1] = op
    for invocation, completion in out:
        assert invocation is not None
        yield invocation, completion
