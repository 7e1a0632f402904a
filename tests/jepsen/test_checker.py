"""The checker on small hand-written histories: a clean one is valid, and each anomaly
planted is found (alone) with its example. No servers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.jepsen import history
from tests.jepsen.checker import KINDS, check, find_cycle, strongly_connected
from tests.jepsen.history import FAIL, INFO, OK, History


class Builder:
    """Writes ops into a history as a run would: invoke, then completion."""

    def __init__(self) -> None:
        self.h = History()

    def op(self, process: int, f: str, invoked: Any, done: Any, type: str = OK) -> None:
        invocation = self.h.invoke(process, f, invoked)
        self.h.complete(invocation, type, done if type != INFO else None)

    def send(self, process: int, *writes: tuple[int, int, int], type: str = OK) -> None:
        """writes: (key, offset, value)."""
        invoked = [["send", k, v] for k, _, v in writes]
        done = [["send", k, [o, v]] for k, o, v in writes]
        self.op(process, "send", invoked, done, type)

    def poll(self, process: int, reads: dict[int, list[tuple[int, int]]], final: bool = False):
        invocation = self.h.invoke(process, "poll", [["poll"]], final=final)
        value = [["poll", {k: [list(r) for r in rs] for k, rs in reads.items()}]]
        self.h.complete(invocation, OK, value)

    def txn(self, process: int, mops: list[list[Any]], type: str = OK) -> None:
        invoked = [["send", m[1], m[2][1]] if m[0] == "send" else ["poll"] for m in mops]
        self.op(process, "txn", invoked, mops, type)

    def assign(self, process: int, keys: list[int], final: bool = False) -> None:
        invocation = self.h.invoke(process, "assign", keys, final=final)
        self.h.complete(invocation, OK)

    def final_read(self, process: int, keys: list[int]) -> None:
        invocation = self.h.invoke(process, "final-read", keys, final=True)
        self.h.complete(invocation, OK)

    def check(self, **kwargs: Any) -> dict[str, Any]:
        return check(self.h.snapshot(), **kwargs)


def three_writes(b: Builder) -> None:
    """Process 0 writes values 1, 2, 3 at offsets 0, 1, 2 of key 0."""
    b.send(0, (0, 0, 1), (0, 1, 2), (0, 2, 3))


def found(result: dict[str, Any]) -> set[str]:
    return set(result["anomalies"])


def test_a_clean_history_is_valid() -> None:
    b = Builder()
    three_writes(b)
    b.send(1, (1, 0, 10))
    b.send(1, (1, 1, 11), (0, 4, 4))  # offset 3: a transaction marker nobody sees
    b.txn(2, [["send", 1, [2, 12]], ["send", 0, [5, 5]]])
    b.txn(2, [["send", 1, [4, 13]]], type=FAIL)  # aborted; never read
    b.send(0, (0, 6, 6))
    b.assign(3, [0])
    b.poll(3, {0: [(0, 1), (1, 2)]})
    b.poll(3, {0: [(2, 3), (4, 4)]})
    b.poll(3, {0: [(5, 5), (6, 6)]})
    b.assign(3, [0, 1])  # re-assigned: reading from the start again is no anomaly
    b.poll(3, {0: [(0, 1)], 1: [(0, 10), (1, 11), (2, 12)]})
    b.assign(9, [0, 1], final=True)
    b.poll(9, {0: [(0, 1), (1, 2), (2, 3), (4, 4), (5, 5), (6, 6)]}, final=True)
    b.poll(9, {1: [(0, 10), (1, 11), (2, 12)]}, final=True)
    b.final_read(9, [0, 1])
    result = b.check()
    assert result["valid?"], result
    assert result["anomalies"] == {}
    assert result["counts"]["unseen"] == 0
    assert result["stats"]["final-read"]


def test_history_round_trips_through_json_lines(tmp_path: Path) -> None:
    b = Builder()
    three_writes(b)
    b.poll(1, {0: [(0, 1), (1, 2)]})
    path = tmp_path / "history.jsonl"
    history.write(b.h.snapshot(), path)
    ops = history.read(path)
    assert [op.to_json() for op in ops] == [op.to_json() for op in b.h.snapshot()]
    assert ops[-1].value == [["poll", {0: [[0, 1], [1, 2]]}]]  # int keys again
    assert [(i.index, c.index if c else None) for i, c in history.pairs(ops)] == [
        (0, 1),
        (2, 3),
    ]


def test_lost_write_below_a_read_offset() -> None:
    b = Builder()
    three_writes(b)
    b.poll(1, {0: [(0, 1)]})
    b.poll(2, {0: [(2, 3)]})  # another process: no skip, but offset 1 was passed
    result = b.check()
    assert found(result) == {"lost-write"}
    [example] = result["anomalies"]["lost-write"]
    assert (example["key"], example["offset"], example["value"]) == (0, 1, 2)
    assert not result["valid?"]


def test_lost_write_never_read_by_the_final_read() -> None:
    b = Builder()
    b.send(0, (0, 0, 1))
    b.assign(9, [0], final=True)
    b.poll(9, {}, final=True)
    b.final_read(9, [0])
    result = b.check()
    assert found(result) == {"lost-write"}
    assert result["anomalies"]["lost-write"][0]["value"] == 1
    assert "final read" in result["anomalies"]["lost-write"][0]["why"]


def test_unseen_without_a_final_read_is_no_anomaly() -> None:
    b = Builder()
    b.send(0, (0, 0, 1))
    result = b.check()
    assert result["valid?"]
    assert result["counts"]["unseen"] == 1


def test_duplicate() -> None:
    b = Builder()
    b.send(0, (0, 0, 1))
    b.poll(1, {0: [(0, 1), (1, 1)]})
    result = b.check()
    assert found(result) == {"duplicate"}
    assert result["anomalies"]["duplicate"][0]["positions"] == [(0, 0), (0, 1)]


def test_inconsistent_offsets() -> None:
    b = Builder()
    b.send(0, (0, 0, 1))
    b.send(1, (0, 0, 2), type=INFO)  # unknown outcome: only its value is known
    b.poll(2, {0: [(0, 2)]})
    result = b.check()
    assert found(result) == {"inconsistent-offsets"}
    assert result["anomalies"]["inconsistent-offsets"][0] == {
        "key": 0,
        "offset": 0,
        "values": [1, 2],
    }


def test_internal_poll_skip() -> None:
    b = Builder()
    three_writes(b)
    b.poll(1, {0: [(0, 1), (2, 3)]})
    b.poll(2, {0: [(0, 1), (1, 2), (2, 3)]})
    result = b.check()
    assert found(result) == {"int-poll-skip"}
    example = result["anomalies"]["int-poll-skip"][0]
    assert example["process"] == 1 and example["skipped"] == [[1, 2]]


def test_external_poll_skip_and_reassignment() -> None:
    b = Builder()
    three_writes(b)
    b.poll(1, {0: [(0, 1)]})
    b.poll(1, {0: [(2, 3)]})
    b.poll(2, {0: [(0, 1), (1, 2), (2, 3)]})
    result = b.check()
    assert found(result) == {"poll-skip"}
    assert result["anomalies"]["poll-skip"][0]["offsets"] == [0, 2]
    # The same with an assign between the polls: the consumer moved on purpose.
    b = Builder()
    three_writes(b)
    b.poll(1, {0: [(0, 1)]})
    b.assign(1, [0])
    b.poll(1, {0: [(2, 3)]})
    b.poll(2, {0: [(0, 1), (1, 2), (2, 3)]})
    assert b.check()["valid?"]


def test_internal_nonmonotonic_poll() -> None:
    b = Builder()
    three_writes(b)
    b.poll(1, {0: [(1, 2), (0, 1)]})
    b.poll(2, {0: [(0, 1), (1, 2), (2, 3)]})
    result = b.check()
    assert found(result) == {"int-nonmonotonic-poll"}
    assert result["anomalies"]["int-nonmonotonic-poll"][0]["offsets"] == [1, 0]


def test_external_nonmonotonic_poll() -> None:
    b = Builder()
    three_writes(b)
    b.poll(1, {0: [(0, 1), (1, 2)]})
    b.poll(1, {0: [(1, 2), (2, 3)]})  # offset 1 again without a seek
    result = b.check()
    assert found(result) == {"nonmonotonic-poll"}
    assert result["anomalies"]["nonmonotonic-poll"][0]["offsets"] == [1, 1]


def test_internal_nonmonotonic_send() -> None:
    b = Builder()
    b.send(0, (0, 1, 1), (0, 0, 2))
    b.poll(1, {0: [(0, 2), (1, 1)]})
    result = b.check()
    assert found(result) == {"int-nonmonotonic-send"}
    assert result["anomalies"]["int-nonmonotonic-send"][0]["offsets"] == [1, 0]


def test_external_nonmonotonic_send() -> None:
    b = Builder()
    b.send(0, (0, 1, 1))
    b.send(0, (0, 0, 2))
    b.poll(1, {0: [(0, 2), (1, 1)]})
    result = b.check()
    assert found(result) == {"nonmonotonic-send"}
    assert result["anomalies"]["nonmonotonic-send"][0]["offsets"] == [1, 0]


def test_aborted_read() -> None:
    b = Builder()
    b.send(0, (0, 0, 1))
    b.txn(1, [["send", 0, [1, 2]]], type=FAIL)
    b.poll(2, {0: [(0, 1), (1, 2)]})
    result = b.check()
    assert found(result) == {"G1a"}
    example = result["anomalies"]["G1a"][0]
    assert (example["value"], example["offset"]) == (2, 1)


def test_write_cycle_g0() -> None:
    b = Builder()
    # T1 is first on key 0, T2 first on key 1: each precedes the other.
    b.txn(0, [["send", 0, [0, 1]], ["send", 1, [1, 11]]])
    b.txn(1, [["send", 0, [1, 2]], ["send", 1, [0, 12]]])
    b.poll(2, {0: [(0, 1), (1, 2)], 1: [(0, 12), (1, 11)]})
    result = b.check()
    assert found(result) == {"G0"}
    [cycle] = result["anomalies"]["G0"]
    assert {step["op"] for step in cycle} == {1, 3}
    assert all(step["then"] == ["ww"] for step in cycle)


def test_plain_sends_interleaved_are_no_write_cycle() -> None:
    b = Builder()
    # As in G0, but plain sends: Kafka promises nothing across a produce's records.
    b.send(0, (0, 0, 1), (1, 1, 11))
    b.send(1, (0, 1, 2), (1, 0, 12))
    b.poll(2, {0: [(0, 1), (1, 2)], 1: [(0, 12), (1, 11)]})
    assert b.check()["valid?"]


def test_a_duplicate_makes_no_write_cycle_of_its_own() -> None:
    b = Builder()
    # Value 1 at offsets 0 and 2 (applied twice): no order says 1 precedes or follows 2.
    b.txn(0, [["send", 0, [0, 1]]])
    b.txn(1, [["send", 0, [1, 2]]])
    b.poll(2, {0: [(0, 1), (1, 2), (2, 1)]})
    result = b.check()
    assert found(result) == {"duplicate"}


def test_circular_information_flow_g1c() -> None:
    b = Builder()
    # Each transaction read what the other wrote.
    b.txn(0, [["poll", {1: [[0, 11]]}], ["send", 0, [0, 1]]])
    b.txn(1, [["poll", {0: [[0, 1]]}], ["send", 1, [0, 11]]])
    result = b.check()
    assert found(result) == {"G1c"}
    [cycle] = result["anomalies"]["G1c"]
    assert {step["op"] for step in cycle} == {1, 3}
    assert all(step["then"] == ["wr"] for step in cycle)


def test_allowed_kinds_keep_the_history_valid() -> None:
    b = Builder()
    b.send(0, (0, 0, 1))
    b.poll(1, {0: [(0, 1), (1, 1)]})
    result = b.check(allowed=["duplicate"])
    assert result["valid?"] and result["anomaly-types"] == ["duplicate"]


def test_every_kind_has_a_test() -> None:
    names = " ".join(name for name in globals() if name.startswith("test_"))
    words = {
        "lost-write": "lost_write",
        "duplicate": "duplicate",
        "inconsistent-offsets": "inconsistent_offsets",
        "int-poll-skip": "internal_poll_skip",
        "poll-skip": "external_poll_skip",
        "int-nonmonotonic-poll": "internal_nonmonotonic_poll",
        "nonmonotonic-poll": "external_nonmonotonic_poll",
        "int-nonmonotonic-send": "internal_nonmonotonic_send",
        "nonmonotonic-send": "external_nonmonotonic_send",
        "G1a": "aborted_read",
        "G0": "g0",
        "G1c": "g1c",
    }
    assert set(words) == set(KINDS)
    assert all(word in names for word in words.values())


@pytest.mark.parametrize("size", [2, 5, 2000])
def test_strongly_connected_finds_long_cycles(size: int) -> None:
    ring = {i: {(i + 1) % size: {"ww"}} for i in range(size)}
    ring[size + 5] = {0: {"ww"}}  # a node leading into the ring, outside it
    [component] = strongly_connected(ring)
    assert component == list(range(size))
    cycle = find_cycle(ring, component, None)
    assert sorted(cycle) == list(range(size))
