"""A checker for Kafka-style histories (tests/jepsen/history.py), after the anomalies
Jepsen's Kafka workload (jepsen.tests.kafka) looks for.

Terms. A *key* is a partition. A *write* is a send micro-op; it is *acknowledged* when its
op completed ``ok`` (its offset is then known), *indeterminate* when ``info``, *failed* when
``fail`` (an aborted transaction: it must never be visible). A *read* is one ``[offset,
value]`` pair returned by a poll micro-op of an ``ok`` op. Values are unique per run, so
a value names the op that wrote it.

The *version order* of a key is every offset of that key known to hold a value (from
acknowledged sends and from reads), sorted; an offset's *index* is its position there.
Kafka leaves holes in offsets (transaction markers, aborted records a read_committed
consumer skips), so skips and order are judged by index, not by raw offset: two reads
one index apart are adjacent in the log as far as anything in the history knows.

The anomalies (``result["anomalies"][kind]`` holds examples, ``result["counts"][kind]``
their number):

- ``inconsistent-offsets``: one offset of one key holds two different values (as sends
  and reads report them): the log changed under a reader, or two writes got one offset.
- ``duplicate``: one value at two or more (key, offset) positions: a write applied twice
  (an idempotent producer's retry let through).
- ``lost-write``: an acknowledged write no read ever returned, although either some read
  of its key reached a higher offset (the log moved past it: it was there, or should have
  been, and is gone), or the history's final read (an ``ok`` op ``final-read`` whose value
  lists the partitions read from the earliest offset to their end) covered its key: then
  every acknowledged write must have been read by someone. Otherwise an acknowledged write
  past the highest offset read is only ``unseen`` (counted, not an anomaly).
- ``int-poll-skip``: within one poll, two successive records of a key whose indices differ
  by more than one: the poll jumped over a value that is in the log (someone else read or
  wrote it there).
- ``poll-skip``: between two successive polls of one consumer process, with no assign or
  subscribe (or rebalance, logged as ``assign``) between them, the first record of a key
  in the later poll is more than one index past the last record of that key in the
  earlier poll.
- ``int-nonmonotonic-poll``: within one poll, a record of a key at an index not above the
  record before it.
- ``nonmonotonic-poll``: the same between successive polls of one process (no reassign
  between): the consumer went backwards or read the same offset again.
- ``int-nonmonotonic-send``: within one op (a send of several records or a transaction),
  a later acknowledged send to a key got an offset not above an earlier one's.
- ``nonmonotonic-send``: the same between successive ops of one producer process.
- ``G1a`` (aborted read): a read returned a value written by a failed op (an aborted
  transaction, or a send that certainly failed).
- ``G0`` (write cycle): a cycle of write-write dependencies between ops. ``ww``: for each
  key, the op that wrote the value at one index precedes the op that wrote the value at
  the next index. Transactions writing to two partitions in opposite orders form one.
  Offsets with two values and values at two offsets are left out of the order (they are
  reported as such; cycles through them would only restate it).
- ``G1c`` (circular information flow): a cycle of ``ww`` and ``wr`` edges with at least
  one ``wr`` (the writer of a value precedes every op that read it), e.g. two
  transactions each reading what the other wrote.

Ops ``ok`` and ``info`` take part in the dependency graph (an ``info`` op's writes are
known from its invocation; whether they happened shows in the reads); ``fail`` ops do not.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any

from tests.jepsen.history import FAIL, INFO, INVOKE, OK, Op

KINDS = (
    "lost-write",
    "duplicate",
    "inconsistent-offsets",
    "int-poll-skip",
    "poll-skip",
    "int-nonmonotonic-poll",
    "nonmonotonic-poll",
    "int-nonmonotonic-send",
    "nonmonotonic-send",
    "G1a",
    "G0",
    "G1c",
)
RESETS = ("assign", "subscribe", "crash")
EXAMPLES = 8  # examples kept per kind
NODES = 1 << 20  # graph nodes per op: the op (a transaction) or one of its sends


def check(
    ops: Sequence[Op], allowed: Iterable[str] = (), examples: int = EXAMPLES
) -> dict[str, Any]:
    """``{"valid?": bool, "anomalies": {kind: [example, ...]}, "counts": {...}}``;
    ``valid?`` is False when an anomaly of a kind not in ``allowed`` was found."""
    return _Checker(ops, examples).run(set(allowed))


class _Checker:
    def __init__(self, ops: Sequence[Op], examples: int) -> None:
        self.ops = ops
        self.limit = examples
        self.found: dict[str, list[Any]] = defaultdict(list)
        self.counts: Counter[str] = Counter()
        # Completions by index; invocations to recover an info op's intended writes.
        self.by_index = {op.index: op for op in ops}
        self.writer: dict[int, int] = {}  # value -> index of the completion that wrote it
        self.writer_node: dict[int, int] = {}  # value -> its writer's node in the graph
        self.write_type: dict[int, str] = {}
        self.positions: dict[int, set[tuple[int, int]]] = defaultdict(set)  # v -> {(k, o)}
        self.at: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
        self.reads: list[tuple[int, int, int, int]] = []  # (reader index, k, o, v)
        self.read_values: set[int] = set()
        self.max_read: dict[int, int] = {}  # key -> highest offset read
        self.acked: list[tuple[int, int, int | None, int]] = []  # (op index, k, o, v)
        self.final_keys: set[int] = set()
        self.has_final = False
        self.index: dict[int, dict[int, int]] = {}  # key -> offset -> index

    def report(self, kind: str, example: Any) -> None:
        self.counts[kind] += 1
        if len(self.found[kind]) < self.limit:
            self.found[kind].append(example)

    # --- collecting -------------------------------------------------------------------

    def collect(self) -> None:
        invocations: dict[tuple[int | str, str], Op] = {}
        for op in self.ops:
            if op.f == "final-read" and op.type == OK:
                # The final read got every partition listed to its end.
                self.has_final = True
                self.final_keys.update(op.value or ())
            if op.type == INVOKE:
                invocations[(op.process, op.f)] = op
                continue
            invocation = invocations.pop((op.process, op.f), None)
            if op.f not in ("send", "poll", "txn"):
                continue
            # An info op's value is what was invoked; its writes are known by value only.
            source = op if op.type != INFO or invocation is None else invocation
            for n, (key, offset, value) in enumerate(source.sends()):
                self.writer[value] = op.index
                self.writer_node[value] = node(op, n)
                self.write_type[value] = op.type
                if op.type == OK:
                    self.acked.append((op.index, key, offset, value))
                    if offset is not None:
                        self.positions[value].add((key, offset))
                        self.at[key][offset].add(value)
            if op.type != OK:
                continue
            for poll in op.polls():
                for key, records in poll.items():
                    for offset, value in records:
                        self.reads.append((op.index, key, offset, value))
                        self.read_values.add(value)
                        self.positions[value].add((key, offset))
                        self.at[key][offset].add(value)
                        if offset > self.max_read.get(key, -1):
                            self.max_read[key] = offset
        for key, offsets in self.at.items():
            self.index[key] = {o: i for i, o in enumerate(sorted(offsets))}

    # --- the anomalies ----------------------------------------------------------------

    def offsets_and_duplicates(self) -> None:
        for key in sorted(self.at):
            for offset in sorted(self.at[key]):
                values = self.at[key][offset]
                if len(values) > 1:
                    self.report(
                        "inconsistent-offsets",
                        {"key": key, "offset": offset, "values": sorted(values)},
                    )
        for value, places in self.positions.items():
            if len(places) > 1:
                self.report(
                    "duplicate",
                    {"value": value, "positions": sorted(places), "writer": self.writer.get(value)},
                )

    def lost_writes(self) -> None:
        for index, key, offset, value in self.acked:
            if value in self.read_values:
                continue
            highest = self.max_read.get(key, -1)
            if offset is not None and highest > offset:
                reason = f"reads of key {key} reached offset {highest}"
            elif key in self.final_keys:
                reason = "never read, not even by the final read from the earliest offset"
            else:
                self.counts["unseen"] += 1
                continue
            self.report(
                "lost-write",
                {"key": key, "offset": offset, "value": value, "op": index, "why": reason},
            )

    def aborted_reads(self) -> None:
        for reader, key, offset, value in self.reads:
            if self.write_type.get(value) == FAIL:
                self.report(
                    "G1a",
                    {
                        "key": key,
                        "offset": offset,
                        "value": value,
                        "reader": reader,
                        "writer": self.writer[value],
                    },
                )

    def order(self) -> None:
        """Skips and order of polls and sends, per process in history order."""
        last_read: dict[int | str, dict[int, tuple[int, int]]] = defaultdict(dict)
        last_sent: dict[int | str, dict[int, int]] = defaultdict(dict)
        for op in self.ops:
            if op.type == INVOKE:
                continue
            if (op.f in RESETS and op.type == OK) or op.f == "crash":
                last_read.pop(op.process, None)
                continue
            if op.type != OK or op.f not in ("send", "poll", "txn"):
                continue
            sent_here: dict[int, int] = {}
            for key, offset, _ in op.sends():
                if offset is None:
                    continue
                before = sent_here.get(key)
                if before is not None and offset <= before:
                    self.report(
                        "int-nonmonotonic-send",
                        {"op": op.index, "key": key, "offsets": [before, offset]},
                    )
                elif before is None:
                    previous = last_sent[op.process].get(key)
                    if previous is not None and offset <= previous:
                        self.report(
                            "nonmonotonic-send",
                            {
                                "process": op.process,
                                "op": op.index,
                                "key": key,
                                "offsets": [previous, offset],
                            },
                        )
                sent_here[key] = offset
            last_sent[op.process].update(sent_here)
            for poll in op.polls():
                for key, records in poll.items():
                    self.poll_order(op, key, records, last_read[op.process])

    def poll_order(
        self,
        op: Op,
        key: int,
        records: list[list[int]],
        last: dict[int, tuple[int, int]],
    ) -> None:
        index = self.index[key]
        previous = last.get(key)  # (offset, index) of the process' last read of key
        for n, (offset, _value) in enumerate(records):
            here = index[offset]
            if previous is not None:
                internal = n > 0
                before_offset, before = previous
                where = {"op": op.index, "process": op.process, "key": key}
                if here <= before:
                    kind = "int-nonmonotonic-poll" if internal else "nonmonotonic-poll"
                    self.report(kind, where | {"offsets": [before_offset, offset]})
                elif here - before > 1:
                    kind = "int-poll-skip" if internal else "poll-skip"
                    skipped = self.skipped(key, before, here)
                    self.report(
                        kind, where | {"offsets": [before_offset, offset], "skipped": skipped}
                    )
            previous = (offset, here)
        if previous is not None:
            last[key] = previous

    def skipped(self, key: int, after: int, before: int) -> list[list[int]]:
        """[[offset, value], ...] of the versions strictly between two indices (a few)."""
        offsets = sorted(self.at[key])[after + 1 : before]
        return [[o, min(self.at[key][o])] for o in offsets[:5]]

    # --- dependency cycles --------------------------------------------------------------

    def graph(self) -> dict[int, dict[int, set[str]]]:
        """node -> successor -> edge kinds ("ww", "wr"). A transaction is one node; each
        send of a plain send op is a node of its own (Kafka promises no atomicity or
        isolation across the records of one produce, so cycles among them are no
        anomaly); plain polls are left out (a node with only incoming edges is in no
        cycle)."""
        edges: dict[int, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
        for offsets in self.at.values():
            # An offset with two values, or a value at two offsets, has no one place in
            # the order: already reported (inconsistent-offsets, duplicate), left out here
            # rather than made into cycles that only restate it.
            writers = [
                self.writer_node[v]
                for o in sorted(offsets)
                if len(offsets[o]) == 1
                for v in offsets[o]
                if v in self.writer_node
                and self.write_type[v] != FAIL
                and len(self.positions[v]) == 1
            ]
            for a, b in pairwise(writers):
                if a != b:
                    edges[a][b].add("ww")
        for reader, _key, _offset, value in self.reads:
            writer = self.writer_node.get(value)
            target = reader * NODES
            if (
                self.by_index[reader].f == "txn"
                and writer is not None
                and writer != target
                and self.write_type[value] != FAIL
            ):
                edges[writer][target].add("wr")
        return edges

    def cycles(self) -> None:
        edges = self.graph()
        ww = {a: {b: k for b, k in succ.items() if "ww" in k} for a, succ in edges.items()}
        for component in strongly_connected(ww):
            cycle = find_cycle(ww, component, None)
            self.report("G0", self.describe(cycle, edges))
        for component in strongly_connected(edges):
            members = set(component)
            through = next(
                (
                    (a, b)
                    for a in component
                    for b, kinds in edges[a].items()
                    if b in members and "wr" in kinds
                ),
                None,
            )
            if through is None:
                continue  # only ww inside: G0, reported above
            cycle = find_cycle(edges, component, through)
            self.report("G1c", self.describe(cycle, edges))

    def describe(
        self, cycle: list[int], edges: dict[int, dict[int, set[str]]]
    ) -> list[dict[str, Any]]:
        steps = []
        for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True):
            op = self.by_index[a // NODES]
            value = op.value if a % NODES == 0 else op.value[a % NODES - 1]
            steps.append(
                {
                    "op": op.index,
                    "process": op.process,
                    "value": value,
                    "then": sorted(edges[a][b]),
                }
            )
        return steps

    # ----------------------------------------------------------------------------------

    def run(self, allowed: set[str]) -> dict[str, Any]:
        self.collect()
        self.offsets_and_duplicates()
        self.lost_writes()
        self.aborted_reads()
        self.order()
        self.cycles()
        anomalies = {kind: self.found[kind] for kind in KINDS if self.found.get(kind)}
        bad = sorted(set(anomalies) - allowed)
        completions = Counter(f"{op.f}:{op.type}" for op in self.ops if op.type != INVOKE)
        return {
            "valid?": not bad,
            "anomaly-types": sorted(anomalies),
            "not-allowed": bad,
            "anomalies": anomalies,
            "counts": {kind: self.counts[kind] for kind in (*KINDS, "unseen")},
            "stats": {
                "ops": sum(1 for op in self.ops if op.type == INVOKE),
                "completions": dict(sorted(completions.items())),
                "acknowledged-writes": len(self.acked),
                "reads": len(self.reads),
                "distinct-values-read": len(self.read_values),
                "final-read": self.has_final,
            },
        }


def node(op: Op, micro: int) -> int:
    """The graph node of an op's ``micro``-th send: the op itself for a transaction."""
    return op.index * NODES + (0 if op.f == "txn" else micro + 1)


def strongly_connected(edges: dict[int, Any]) -> list[list[int]]:
    """Tarjan's algorithm, iterative (histories give graphs too deep for recursion): the
    strongly connected components with more than one node."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    found: list[list[int]] = []
    counter = 0
    nodes = set(edges)
    for succ in edges.values():
        nodes.update(succ)
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(edges.get(succ, ())))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def find_cycle(
    edges: dict[int, Any], component: list[int], through: tuple[int, int] | None
) -> list[int]:
    """A cycle inside ``component`` through the edge ``through`` (else through any edge
    leaving its first node): its nodes in order, found by a breadth-first search from the
    edge's head back to its tail."""
    members = set(component)
    if through is None:
        tail = component[0]
        through = (tail, next(b for b in sorted(edges.get(tail, ())) if b in members))
    tail, head = through
    parent: dict[int, int | None] = {head: None}
    queue = deque([head])
    while queue and tail not in parent:
        node = queue.popleft()
        for succ in sorted(edges.get(node, ())):
            if succ in members and succ not in parent:
                parent[succ] = node
                queue.append(succ)
    path: list[int] = []  # head ... tail
    step: int | None = tail
    while step is not None:
        path.append(step)
        step = parent[step]
    path.reverse()
    return [tail, *path[:-1]]


def summary(result: dict[str, Any]) -> str:
    """One line: valid or the anomaly counts."""
    counts = {k: n for k, n in result["counts"].items() if n and k != "unseen"}
    if not counts:
        return f"valid ({result['counts']['unseen']} unseen)"
    return ", ".join(f"{k} {n}" for k, n in counts.items())
