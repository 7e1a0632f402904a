"""The program of a consumer group member process (tests.wire.groups_common.MemberProcess):
``python -m tests.wire.group_member OPTIONS_JSON`` runs a confluent-kafka, kafka-python or
aiokafka consumer (tests/wire/js/kafkajs_group.js is the kafkajs one). It reports on
stdout, one JSON object a line: ``ready`` once its consumer is built, ``assignment`` when
its ``assignment()`` changed, its rebalance callbacks (``assign``, ``revoke``, ``lost``),
``records`` before committing them, ``error``, ``commit_error`` and ``closed``. It
subscribes on ``go`` read from stdin and closes its consumer on ``stop`` or SIGTERM.

It imports no more than it needs, to start fast: the tests start many members."""

from __future__ import annotations

import importlib
import json
import signal
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

SESSION_MS = 2000  # group members' session timeout in most tests
HEARTBEAT_MS = 250
REQUEST_TIMEOUT_MS = 30_000
# kafka-python 3.0's poll waits at most this long for a rebalance, then leaves the join
# in flight; if its leader's join and sync end between two polls, it drops them and,
# when its own metadata check no longer asks for a rejoin (the leader's assignment
# refreshed it), never finishes the join: no heartbeats, no partitions, expelled after
# its session timeout. A poll that outlasts a rebalance leaves no such gap (records end
# it early; the listener reports assignments at once).
KAFKA_PYTHON_POLL_MS = 1000


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
    (their names are the same) in a group: from the earliest offset, no auto commit, short
    fetch waits; ``options`` add to them or replace them."""
    return {
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "client_id": client_id,
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "session_timeout_ms": session_ms,
        "heartbeat_interval_ms": heartbeat_ms,
        "fetch_max_wait_ms": 100,
        "request_timeout_ms": REQUEST_TIMEOUT_MS,
        **options,
    }


def records_of(batch: dict[Any, list[Any]]) -> list[tuple[int, int, str]]:
    """The records of a kafka-python or aiokafka poll (topic partition -> messages), as
    (partition, offset, value)."""
    return [(m.partition, m.offset, m.value.decode()) for ms in batch.values() for m in ms]


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

    def records(self, items: list[tuple[int, int, str]]) -> bool:
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
            batch = consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS, max_records=o["max_records"])
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
