"""Consumer groups through the wire front end: group throughput and rebalance time.

Starts a private redis-server and a `kafkaesque serve` broker (default group settings), then
with confluent-kafka: produces N records of 100 bytes to a 6-partition topic; consumes them
with a group of one member (the baseline) and with a group of three members (each member
its own process), printing records/s and the ratio to the baseline; then measures how long
a rebalance takes when a third member joins a stable group of two (from the new member's
subscribe to every member holding its new assignment), for the eager range assignor and
for cooperative-sticky, with the client's default heartbeat interval (3 s: members learn of
a rebalance by heartbeat) and with a 100 ms one.

    python scripts/bench/groups.py [--records N] [--trials T]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from typing import Any

from broker_process import VALUE, broker_on_embedded_redis, produce
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 6


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, 1)], request_timeout=30)
    futures[topic].result(30)


def member(name: str, bootstrap: str, topic: str, group: str, config: dict, inbox, outbox) -> None:
    """A group member process: waits for "go", subscribes, reports its assignment (after
    every rebalance callback) and its record count (after every batch) until "stop"."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
            **config,
        }
    )

    cooperative = config.get("partition.assignment.strategy") == "cooperative-sticky"
    last: list[int] | None = None

    def report() -> None:
        nonlocal last
        parts = sorted(tp.partition for tp in consumer.assignment())
        if parts != last:
            last = parts
            outbox.put(("assignment", name, parts, time.time()))

    # Assign in the callbacks (the documented pattern) so assignment() is current at once.
    def on_assign(c: Consumer, partitions: list) -> None:
        if cooperative:
            c.incremental_assign(partitions)
        else:
            c.assign(partitions)
        report()

    def on_revoke(c: Consumer, partitions: list) -> None:
        if cooperative:
            c.incremental_unassign(partitions)
        else:
            c.unassign()
        report()

    outbox.put(("ready", name, None, time.time()))
    assert inbox.get() == "go"
    outbox.put(("subscribe", name, None, time.time()))
    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    count = 0
    while True:
        messages = consumer.consume(10_000, timeout=0.2)
        if messages:
            count += sum(1 for m in messages if m.error() is None)
            outbox.put(("count", name, count, time.time()))
        if not inbox.empty() and inbox.get() == "stop":
            break
    consumer.close()
    outbox.put(("closed", name, None, time.time()))


class Group:
    """Member processes of one group, with what they reported."""

    def __init__(self, bootstrap: str, topic: str, group: str, config: dict | None = None) -> None:
        self.ctx = multiprocessing.get_context("spawn")
        self.outbox = self.ctx.Queue()
        self.args = (bootstrap, topic, group, config or {})
        self.inboxes: dict[str, Any] = {}
        self.procs: list[Any] = []
        self.assigned: dict[str, tuple[list[int], float]] = {}
        self.counts: dict[str, tuple[int, float]] = {}
        self.subscribed: dict[str, float] = {}

    def add(self, names: list[str]) -> None:
        for name in names:
            inbox = self.ctx.Queue()
            proc = self.ctx.Process(
                target=member, args=(name, *self.args, inbox, self.outbox), daemon=True
            )
            proc.start()
            self.inboxes[name] = inbox
            self.procs.append(proc)
        ready = set()
        while ready != set(names):
            kind, name, _, _ = self.outbox.get(timeout=60)
            if kind == "ready":
                ready.add(name)
        for name in names:
            self.inboxes[name].put("go")

    def pump(self, timeout: float = 0.2) -> None:
        try:
            kind, name, value, t = self.outbox.get(timeout=timeout)
        except Exception:  # queue.Empty
            return
        if kind == "assignment":
            self.assigned[name] = (value, t)
        elif kind == "count":
            self.counts[name] = (value, t)
        elif kind == "subscribe":
            self.subscribed[name] = t

    def wait(self, condition, what: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}: {self.assigned}")
            if any(not p.is_alive() for p in self.procs):
                raise RuntimeError(f"a member process died while waiting for {what}")
            self.pump()

    def split(self, members: int) -> bool:
        parts = [p for p, _ in self.assigned.values()]
        flat = [x for p in parts for x in p]
        sizes = [len(p) for p in parts]
        return (
            len(parts) == members
            and sorted(flat) == list(range(PARTITIONS))
            and max(sizes) - min(sizes) <= 1
        )

    def stop(self) -> None:
        for inbox in self.inboxes.values():
            inbox.put("stop")
        for proc in self.procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()


def group_consume(bootstrap: str, topic: str, n: int, members: int) -> float:
    """Seconds from the group's assignment to its last record (all n consumed)."""
    group = Group(bootstrap, topic, f"throughput-{members}")
    try:
        group.add([f"m{i}" for i in range(members)])
        group.wait(lambda: group.split(members), f"{members} members to be assigned")
        started = min(t for _, t in group.assigned.values())
        group.wait(
            lambda: sum(c for c, _ in group.counts.values()) >= n, f"{n} records", timeout=600
        )
        total = sum(c for c, _ in group.counts.values())
        assert total == n, f"{total} records consumed, {n} produced"
        return max(t for _, t in group.counts.values()) - started
    finally:
        group.stop()


def rebalance(bootstrap: str, topic: str, name: str, config: dict) -> float:
    """Seconds from a third member's subscribe to all three holding their new assignment."""
    group = Group(bootstrap, topic, name, config)
    try:
        group.add(["a", "b"])
        group.wait(lambda: group.split(2), "2 members")
        time.sleep(0.5)
        group.add(["c"])
        group.wait(lambda: group.split(3), "3 members")
        return max(t for _, t in group.assigned.values()) - group.subscribed["c"]
    finally:
        group.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--trials", type=int, default=3, help="rebalances measured per case")
    args = parser.parse_args()
    n = args.records
    cases = {
        "range, heartbeat 3 s (default)": {"partition.assignment.strategy": "range"},
        "range, heartbeat 100 ms": {
            "partition.assignment.strategy": "range",
            "heartbeat.interval.ms": 100,
        },
        "cooperative-sticky, heartbeat 3 s": {
            "partition.assignment.strategy": "cooperative-sticky"
        },
        "cooperative-sticky, heartbeat 100 ms": {
            "partition.assignment.strategy": "cooperative-sticky",
            "heartbeat.interval.ms": 100,
        },
    }
    with broker_on_embedded_redis() as (bootstrap, _):
        create_topic(bootstrap, "bench")
        produce_s = produce(bootstrap, "bench", n, PARTITIONS)
        single_s = group_consume(bootstrap, "bench", n, 1)
        three_s = group_consume(bootstrap, "bench", n, 3)
        create_topic(bootstrap, "rebalance")
        times = {
            case: [
                rebalance(bootstrap, "rebalance", f"rebalance-{i}-{k}", config)
                for k in range(args.trials)
            ]
            for i, (case, config) in enumerate(cases.items())
        }
    mb = n * len(VALUE) / 1e6
    print(
        f"{n} records of {len(VALUE)} bytes in {PARTITIONS} partitions, confluent-kafka group "
        "consumers <-> kafkaesque serve <-> redis-server"
    )
    print(f"(cpus: {os.cpu_count()}; members, broker and Redis share them)")
    print(f"produce:              {n / produce_s:>10,.0f} records/s {mb / produce_s:>7.1f} MB/s")
    print(f"group of 1 consumer:  {n / single_s:>10,.0f} records/s {mb / single_s:>7.1f} MB/s")
    print(
        f"group of 3 consumers: {n / three_s:>10,.0f} records/s {mb / three_s:>7.1f} MB/s"
        f"   ratio to 1 consumer {single_s / three_s:.2f}"
    )
    print(f"rebalance when a 3rd member joins 2 (subscribe -> all assigned), {args.trials} trials:")
    for case, samples in times.items():
        shown = " ".join(f"{s:.2f}" for s in samples)
        print(f"  {case:<38} median {statistics.median(samples):.2f} s   ({shown})")


if __name__ == "__main__":
    main()
