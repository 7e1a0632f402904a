"""Transactions with real clients (confluent-kafka, aiokafka, kafkajs, kafka-python) and
raw requests: the coordinator's protocol, zombie fencing, timeouts, offsets sent to a
transaction (consume-transform-produce), a broker restart mid-transaction, what
read_committed and read_uncommitted consumers see, and the errors of bad requests."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection, decode_response, request
from tests.wire.clients import JS, requires
from tests.wire.common import (
    FAST_GROUP_ARGS,
    TIMEOUT,
    create_topic,
    produce_numbered,
    value_of,
    wait_until,
)
from tests.wire.test_transactions_fetch import latest

# Timed-out transactions are looked for every 0.2 s (Kafka: every 10 s); group members may
# ask for sessions from 1 s (the processor's are 3 s: a killed run's member is gone sooner).
BROKER_ARGS = (
    *FAST_GROUP_ARGS,
    "--config",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=200",
)
PROCESSOR = Path(__file__).with_name("txn_processor.py")


def init_producer(
    conn: Connection,
    transactional_id: str,
    timeout_ms: int = 60_000,
    current: tuple[int, int] = (-1, -1),
    version: int = 4,
) -> Any:
    """A raw InitProducerId for ``transactional_id`` (``current``: KIP-360's id and epoch)."""
    return conn.request(
        request(
            22,
            version,
            transactional_id=transactional_id,
            transaction_timeout=timeout_ms,
            producer_id=current[0],
            producer_epoch=current[1],
        )
    )


def producer(bootstrap: str, transactional_id: str, **config: object) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **config,
        }
    )
    p.init_transactions(TIMEOUT)
    return p


def consume_all(
    bootstrap: str, topic: str, partitions: int, isolation: str, expect: int | None = None
) -> list[bytes]:
    """Every record value of the topic (from the start), read with ``isolation``."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    idle_until = time.monotonic() + 3
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                if (expect is None or len(values) >= expect) and time.monotonic() > idle_until:
                    break
                continue
            if msg.error():
                continue
            values.append(msg.value())
            idle_until = time.monotonic() + 1
    finally:
        c.close()
    return values


def describe(bootstrap: str, transactional_id: str) -> Any:
    """DescribeTransactions of one id. kio cannot read Kafka's -1 ("not started") as a
    start time, so every -1 int64 of the frame is read as 0 (no start time, no producer)."""
    req = request(65, 0, transactional_ids=(transactional_id,))
    with Connection(bootstrap) as conn:
        correlation_id = conn.send_request(req)
        frame = conn.read_frame()
    assert frame is not None
    frame = frame.replace(b"\xff" * 8, b"\x00" * 8)
    (state,) = decode_response(65, 0, frame, correlation_id).transaction_states
    return state


# -- the producer's protocol -----------------------------------------------------------------
def test_commit_and_abort(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 2)
    tid = f"tx-{topic}"
    p = producer(broker.bootstrap, tid)
    first = describe(broker.bootstrap, tid)
    assert first.error_code == ErrorCode.none and first.transaction_state == "Empty", first
    assert first.producer_epoch == 0
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, f"c{i}".encode(), partition=i % 2)
    p.flush(TIMEOUT)
    ongoing = describe(broker.bootstrap, tid)
    assert ongoing.transaction_state == "Ongoing", ongoing
    assert [(t.topic, sorted(t.partitions)) for t in ongoing.topics] == [(topic, [0, 1])]
    p.commit_transaction(TIMEOUT)
    assert describe(broker.bootstrap, tid).transaction_state == "CompleteCommit"
    p.begin_transaction()
    p.produce(topic, b"aborted", partition=0)
    p.flush(TIMEOUT)
    p.abort_transaction(TIMEOUT)
    assert describe(broker.bootstrap, tid).transaction_state == "CompleteAbort"
    # Uncommitted reads see all of it; the records are there with the producer's id.
    values = consume_all(broker.bootstrap, topic, 2, "read_uncommitted", 11)
    assert sorted(values) == sorted([f"c{i}".encode() for i in range(10)] + [b"aborted"])
    with Connection(broker.bootstrap) as conn:
        listed = conn.request(
            request(
                66, 1, state_filters=("CompleteAbort",), producer_id_filters=(), duration_filter=-1
            )
        )
    assert tid in {t.transactional_id for t in listed.transaction_states}


def test_read_committed_skips_aborted(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    p = producer(broker.bootstrap, f"tx-{topic}")
    p.begin_transaction()
    p.produce(topic, b"gone", partition=0)
    p.flush(TIMEOUT)  # sent: the abort must hide it, not librdkafka drop it
    p.abort_transaction(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, b"kept", partition=0)
    p.commit_transaction(TIMEOUT)
    assert consume_all(broker.bootstrap, topic, 1, "read_committed", 1) == [b"kept"]


def test_zombie_is_fenced(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    tid = f"tx-{topic}"
    zombie = producer(broker.bootstrap, tid)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(TIMEOUT)
    # A second instance aborts the zombie's open transaction and takes the next epochs.
    successor = producer(broker.bootstrap, tid)
    state = describe(broker.bootstrap, tid)
    assert state.transaction_state == "Empty" and state.producer_epoch == 2, state
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=0)
    successor.commit_transaction(TIMEOUT)
    with pytest.raises(KafkaException) as caught:
        zombie.commit_transaction(TIMEOUT)
    error = caught.value.args[0]
    assert error.code() == KafkaError._FENCED or error.fatal(), error


def test_timed_out_transaction_is_aborted(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    tid = f"tx-{topic}"
    p = producer(broker.bootstrap, tid, **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    p.produce(topic, b"late", partition=0)
    p.flush(TIMEOUT)
    assert describe(broker.bootstrap, tid).transaction_state == "Ongoing"
    wait_until(
        lambda: describe(broker.bootstrap, tid).transaction_state == "CompleteAbort",
        "the coordinator aborting the transaction",
    )
    assert describe(broker.bootstrap, tid).producer_epoch == 1  # fenced
    with pytest.raises(KafkaException):
        p.commit_transaction(TIMEOUT)


def test_transaction_timeout_above_max_is_refused(broker):
    with Connection(broker.bootstrap) as conn:
        for timeout in (0, 900_001):
            refused = init_producer(conn, "tx-long", timeout_ms=timeout)
            assert refused.error_code == ErrorCode.invalid_transaction_timeout, refused
        ok = init_producer(conn, "tx-long", timeout_ms=900_000)
        assert ok.error_code == ErrorCode.none and ok.producer_id >= 0, ok


# -- offsets sent to a transaction ----------------------------------------------------------
def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


def test_send_offsets_commit_and_abort(broker, topic_name):
    source, sink = topic_name("in"), topic_name("out")
    create_topic(broker.bootstrap, source, 1)
    create_topic(broker.bootstrap, sink, 1)
    group = f"g-{source}"
    p = producer(broker.bootstrap, f"tx-{source}")
    metadata = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        group_metadata = metadata.consumer_group_metadata()
    finally:
        metadata.close()
    p.begin_transaction()
    p.produce(sink, b"x", partition=0)
    p.send_offsets_to_transaction([TopicPartition(source, 0, 7)], group_metadata, TIMEOUT)
    # Pending: a require_stable fetch is told to wait, a plain one sees nothing yet.
    with Connection(broker.bootstrap) as conn:
        fetched = conn.request(
            request(
                9,
                7,
                group_id=group,
                topics=[{"name": source, "partition_indexes": [0]}],
                require_stable=True,
            )
        )
        assert fetched.topics[0].partitions[0].error_code == ErrorCode.unstable_offset_commit
        plain = conn.request(
            request(
                9,
                7,
                group_id=group,
                topics=[{"name": source, "partition_indexes": [0]}],
                require_stable=False,
            )
        )
        assert plain.topics[0].partitions[0].committed_offset == -1
    p.commit_transaction(TIMEOUT)
    assert committed_offsets(broker.bootstrap, group, source, 1) == {0: 7}
    p.begin_transaction()
    p.produce(sink, b"y", partition=0)
    p.send_offsets_to_transaction([TopicPartition(source, 0, 9)], group_metadata, TIMEOUT)
    p.abort_transaction(TIMEOUT)
    assert committed_offsets(broker.bootstrap, group, source, 1) == {0: 7}


def run_processor(
    broker, source: str, sink: str, group: str, tid: str, **env: str
) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(PROCESSOR), broker.bootstrap, source, sink, group, tid],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_processor_killed_mid_transaction_is_exactly_once(broker, topic_name):
    """consume-transform-produce: a processor SIGKILLed inside a transaction and started
    again leaves every input in the output exactly once (read_committed)."""
    source, sink = topic_name("in"), topic_name("out")
    create_topic(broker.bootstrap, source, 2)
    create_topic(broker.bootstrap, sink, 2)
    count = 200
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(count):
        p.produce(source, f"v{i}".encode(), partition=i % 2)
    p.flush(TIMEOUT)
    group, tid = f"g-{source}", f"tx-{source}"
    # The first run stalls inside its third transaction, and is killed there.
    first = run_processor(broker, source, sink, group, tid, TXN_STALL_AFTER="2")
    try:
        assert first.stdout is not None
        line = first.stdout.readline()
        assert line.startswith(b"stalled"), line + first.stderr.read()
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    second = run_processor(broker, source, sink, group, tid)
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0, err.decode()
    values = consume_all(broker.bootstrap, sink, 2, "read_committed", count)
    assert sorted(values) == sorted(f"v{i}!".encode() for i in range(count))


# -- a broker restart ---------------------------------------------------------------------
def test_restart_between_add_partitions_and_end(broker_factory, topic_name):
    server = broker_factory(*BROKER_ARGS)
    topic = topic_name()
    create_topic(server.bootstrap, topic, 1)
    tid = f"tx-{topic}"
    with Connection(server.bootstrap) as conn:
        init = init_producer(conn, tid)
        assert init.error_code == ErrorCode.none
        added = conn.request(
            request(
                24,
                3,
                v3_and_below_transactional_id=tid,
                v3_and_below_producer_id=init.producer_id,
                v3_and_below_producer_epoch=init.producer_epoch,
                v3_and_below_topics=[{"name": topic, "partitions": [0]}],
            )
        )
        assert (
            added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
            == ErrorCode.none
        )
    assert server.stop() in (0, -signal.SIGTERM)
    server.start()
    assert describe(server.bootstrap, tid).transaction_state == "Ongoing"
    with Connection(server.bootstrap) as conn:
        ended = conn.request(
            request(
                26,
                3,
                transactional_id=tid,
                producer_id=init.producer_id,
                producer_epoch=init.producer_epoch,
                committed=True,
            )
        )
        assert ended.error_code == ErrorCode.none, ended
        again = conn.request(
            request(
                26,
                3,
                transactional_id=tid,
                producer_id=init.producer_id,
                producer_epoch=init.producer_epoch,
                committed=True,
            )
        )
        assert again.error_code == ErrorCode.none, again  # a retry of a completed commit
    assert describe(server.bootstrap, tid).transaction_state == "CompleteCommit"


# -- bad input ---------------------------------------------------------------------------
def test_a_batch_outside_the_ongoing_transaction_is_refused(broker, topic_name):
    """A transactional batch reaching a partition its producer's ongoing transaction does
    not hold is refused (Kafka's transaction.partition.verification): a late batch of a
    transaction the client already aborted would open one that nothing ends, holding
    read_committed readers back for ever, and the producer's next commit there would
    commit it."""
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    tid = f"tx-{topic}"

    def txn_produce(
        conn: Connection, value: bytes, pid: int, epoch: int, seq: int, txn_id: str | None = tid
    ) -> int:
        batch = build_batch(
            [value], producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True
        )
        partition_data = [{"index": 0, "records": batch}]
        response = conn.request(
            request(
                0,
                7,
                transactional_id=txn_id,
                acks=-1,
                timeout=10_000,
                topic_data=[{"name": topic, "partition_data": partition_data}],
            )
        )
        return response.responses[0].partition_responses[0].error_code

    def add(conn: Connection, pid: int, epoch: int) -> None:
        response = conn.request(
            request(
                24,
                3,
                v3_and_below_transactional_id=tid,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[{"name": topic, "partitions": [0]}],
            )
        )
        assert (
            response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
            == 0
        )

    def end(conn: Connection, pid: int, epoch: int, commit: bool) -> None:
        response = conn.request(
            request(
                26, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
            )
        )
        assert response.error_code == ErrorCode.none

    with Connection(broker.bootstrap) as conn:
        init = init_producer(conn, tid)
        pid, epoch = init.producer_id, init.producer_epoch
        # Not added by AddPartitionsToTxn: refused.
        assert txn_produce(conn, b"unadded", pid, epoch, 0) == ErrorCode.invalid_txn_state
        add(conn, pid, epoch)
        # AddPartitionsToTxn v4+ verify_only (a broker's question): in the transaction.
        verified = conn.request(
            request(
                24,
                4,
                transactions=[
                    {
                        "transactional_id": tid,
                        "producer_id": pid,
                        "producer_epoch": epoch,
                        "verify_only": True,
                        "topics": [{"name": topic, "partitions": [0]}],
                    }
                ],
            )
        )
        [txn_result] = verified.results_by_transaction
        [by_partition] = txn_result.topic_results[0].results_by_partition
        assert by_partition.partition_error_code == ErrorCode.none
        # Transactional records without their transactional id, as Kafka answers.
        refused = txn_produce(conn, b"anonymous", pid, epoch, 0, txn_id=None)
        assert refused == ErrorCode.transactional_id_authorization_failed
        assert txn_produce(conn, b"t1", pid, epoch, 0) == ErrorCode.none
        end(conn, pid, epoch, commit=False)
        # The batch the client timed out arrives after the abort, at the same epoch...
        assert txn_produce(conn, b"late", pid, epoch, 1) == ErrorCode.invalid_txn_state
        # ... and after the client bumped its epoch (KIP-360), as librdkafka does.
        bumped = init_producer(conn, tid, current=(pid, epoch))
        assert txn_produce(conn, b"late", pid, epoch, 1) == ErrorCode.invalid_producer_epoch
        assert conn.produce(topic, 0, build_batch([b"plain"])).error_code == ErrorCode.none
        # Nothing is left open: the last stable offset is the log end.
        assert latest(conn, topic, 1) == latest(conn, topic, 0)
        epoch = bumped.producer_epoch
        add(conn, pid, epoch)
        assert txn_produce(conn, b"t2", pid, epoch, 0) == ErrorCode.none
        end(conn, pid, epoch, commit=True)
    assert consume_all(broker.bootstrap, topic, 1, "read_committed") == [b"plain", b"t2"]


def test_bad_requests(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    tid = f"tx-{topic}"
    with Connection(broker.bootstrap) as conn:

        def end(tid: str, pid: int, epoch: int, version: int = 3, commit: bool = True) -> ErrorCode:
            return conn.request(
                request(
                    26,
                    version,
                    transactional_id=tid,
                    producer_id=pid,
                    producer_epoch=epoch,
                    committed=commit,
                )
            ).error_code

        def add(pid: int, epoch: int, topics: list, version: int = 3) -> dict:
            r = conn.request(
                request(
                    24,
                    version,
                    v3_and_below_transactional_id=tid,
                    v3_and_below_producer_id=pid,
                    v3_and_below_producer_epoch=epoch,
                    v3_and_below_topics=topics,
                )
            )
            return {
                (t.name, p.partition_index): p.partition_error_code
                for t in r.results_by_topic_v3_and_below
                for p in t.results_by_partition
            }

        assert end("no-such-id", 1, 0) == ErrorCode.invalid_producer_id_mapping
        init = init_producer(conn, tid)
        pid, epoch = init.producer_id, init.producer_epoch
        assert end(tid, pid, epoch) == ErrorCode.invalid_txn_state  # nothing open
        assert end(tid, pid + 1, epoch) == ErrorCode.invalid_producer_id_mapping
        missing = topic_name("missing")
        assert add(
            pid, epoch, [{"name": topic, "partitions": [0]}, {"name": missing, "partitions": [0]}]
        ) == {
            (topic, 0): ErrorCode.operation_not_attempted,
            (missing, 0): ErrorCode.unknown_topic_or_partition,
        }
        assert add(pid, epoch, [{"name": topic, "partitions": [5]}]) == {
            (topic, 5): ErrorCode.unknown_topic_or_partition
        }
        assert describe(broker.bootstrap, tid).transaction_state == "Empty"  # nothing added
        assert add(pid, epoch, [{"name": topic, "partitions": [0]}]) == {(topic, 0): ErrorCode.none}
        # A new instance bumps the epoch (aborting the open transaction): the old is fenced.
        again = init_producer(conn, tid)
        assert again.producer_id == pid and again.producer_epoch == epoch + 2, again
        assert end(tid, pid, epoch) == ErrorCode.producer_fenced
        assert end(tid, pid, epoch, version=1) == ErrorCode.invalid_producer_epoch
        assert add(pid, epoch, [{"name": topic, "partitions": [0]}]) == {
            (topic, 0): ErrorCode.producer_fenced
        }
        assert add(pid, epoch, [{"name": topic, "partitions": [0]}], version=1) == {
            (topic, 0): ErrorCode.invalid_producer_epoch
        }
        # KIP-360: the old instance asking for a bump with its stale epoch is fenced.
        stale = init_producer(conn, tid, current=(pid, epoch))
        assert stale.error_code == ErrorCode.producer_fenced, stale
        # ... the current one gets the next epoch.
        bumped = init_producer(conn, tid, current=(pid, epoch + 2))
        assert (bumped.error_code, bumped.producer_epoch) == (ErrorCode.none, epoch + 3), bumped
        # Unknown ids: DescribeTransactions says TRANSACTIONAL_ID_NOT_FOUND.
        assert (
            describe(broker.bootstrap, "no-such-id").error_code
            == ErrorCode.transactional_id_not_found
        )
        listed = conn.request(
            request(
                66,
                2,
                state_filters=("Bogus",),
                producer_id_filters=(),
                duration_filter=-1,
                transactional_id_pattern=None,
            )
        )
        assert listed.unknown_state_filters == ("Bogus",)
        bad_pattern = conn.request(
            request(
                66,
                2,
                state_filters=(),
                producer_id_filters=(),
                duration_filter=-1,
                transactional_id_pattern="([",
            )
        )
        assert bad_pattern.error_code == ErrorCode.invalid_regular_expression


def test_txn_offset_commit_checks_the_group(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    tid, group = f"tx-{topic}", f"g-{topic}"
    with Connection(broker.bootstrap) as conn:
        joined = conn.join_new_member(group, [topic])
        assert joined.error_code == ErrorCode.none, joined
        init = init_producer(conn, tid)
        pid, epoch = init.producer_id, init.producer_epoch

        def commit(generation: int, member: str, producer_epoch: int = epoch) -> ErrorCode:
            r = conn.request(
                request(
                    28,
                    3,
                    transactional_id=tid,
                    group_id=group,
                    producer_id=pid,
                    producer_epoch=producer_epoch,
                    generation_id=generation,
                    member_id=member,
                    group_instance_id=None,
                    topics=[
                        {
                            "name": topic,
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "committed_offset": 3,
                                    "committed_leader_epoch": -1,
                                    "committed_metadata": "",
                                }
                            ],
                        }
                    ],
                )
            )
            return r.topics[0].partitions[0].error_code

        assert commit(-1, "") == ErrorCode.invalid_txn_state  # AddOffsetsToTxn first
        added = conn.request(
            request(
                25, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
            )
        )
        assert added.error_code == ErrorCode.none, added
        assert commit(joined.generation_id + 1, joined.member_id) == ErrorCode.illegal_generation
        assert commit(joined.generation_id, "nobody") == ErrorCode.unknown_member_id
        assert (
            commit(joined.generation_id, joined.member_id, epoch - 1)
            == ErrorCode.invalid_producer_epoch
        )
        assert commit(joined.generation_id, joined.member_id) == ErrorCode.none
        ended = conn.request(
            request(
                26, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True
            )
        )
        assert ended.error_code == ErrorCode.none
        fetched = conn.request(
            request(
                9,
                7,
                group_id=group,
                topics=[{"name": topic, "partition_indexes": [0]}],
                require_stable=True,
            )
        )
        assert fetched.topics[0].partitions[0].committed_offset == 3


# -- aiokafka ----------------------------------------------------------------------------
def test_aiokafka_transaction(broker, topic_name):
    from aiokafka import AIOKafkaProducer

    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    tid = f"tx-{topic}"

    async def scenario() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=tid)
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(topic, b"aio", partition=0)
            assert describe(broker.bootstrap, tid).transaction_state == "CompleteCommit"
            await p.begin_transaction()
            await p.send_and_wait(topic, b"aio-aborted", partition=0)
            await p.abort_transaction()
            assert describe(broker.bootstrap, tid).transaction_state == "CompleteAbort"
        finally:
            await p.stop()

    asyncio.run(scenario())
    assert sorted(consume_all(broker.bootstrap, topic, 1, "read_uncommitted", 2)) == [
        b"aio",
        b"aio-aborted",
    ]


# -- the CLI ------------------------------------------------------------------------------
def test_cli_list_and_describe(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    tid = f"tx-{topic}"
    p = producer(broker.bootstrap, tid)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    p.flush(TIMEOUT)
    listed = broker.cli("transactions", "list", "--state", "Ongoing").stdout.decode()
    assert any(
        line.split()[0] == tid and line.split()[-1] == "Ongoing" for line in listed.splitlines()
    ), listed
    described = broker.cli("transactions", "describe", tid).stdout.decode()
    assert f"{topic}-0" in described and "Ongoing" in described, described
    p.abort_transaction(TIMEOUT)
    missing = broker.cli("transactions", "describe", "no-such-id", check=False)
    assert missing.returncode != 0
    err = missing.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "no such transactional id: no-such-id" in err[0], err


# -- kafkajs ------------------------------------------------------------------------------
class KafkaJSTxn:
    """tests/wire/js/kafkajs_txn.js in a node process: ``expect`` reads its next event;
    in step mode each stage waits for ``next``."""

    def __init__(self, tmp_path: Path, **options: object) -> None:
        self.stderr_path = tmp_path / "kafkajs_txn.stderr"
        self.events: queue.Queue[dict | None] = queue.Queue()
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                ["node", str(JS / "kafkajs_txn.js"), json.dumps(options)],
                cwd=JS,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))
        self.events.put(None)

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-5000:]

    def expect(self, ev: str, timeout: float = 3 * TIMEOUT) -> dict:
        try:
            got = self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no {ev!r} from kafkajs in {timeout:.0f} s\n{self.log()}"
            ) from None
        assert got is not None and got["ev"] == ev, f"{got} instead of {ev!r}\n{self.log()}"
        return got

    def next(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"next\n")
        self.proc.stdin.flush()

    def close(self) -> int:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (-1: none), by kafka-python's admin (OffsetFetch)."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        wanted = [KafkaTopicPartition(topic, p) for p in range(partitions)]
        got = admin.list_group_offsets({group: wanted})[group]
    finally:
        admin.close()
    return {tp.partition: got[tp].offset if tp in got else -1 for tp in wanted}


def ctp_topics(broker, topic_name, count: int) -> tuple[str, str, dict[int, int]]:
    """A source of ``count`` numbered records (2 partitions) and an empty sink (2
    partitions) for a consume-transform-produce run; the source's end offsets."""
    source, sink = topic_name("in"), topic_name("out")
    create_topic(broker.bootstrap, source, 2)
    create_topic(broker.bootstrap, sink, 2)
    return source, sink, produce_numbered(broker.bootstrap, source, 2, 0, count)


KAFKAJS_SINK = (
    [f"commit-{i}".encode() for i in range(4)]
    + [f"abort-{i}".encode() for i in range(3)]
    + [b"late"]
)  # kafkajs_txn.js's own records; those of the transforms are value_of(i) + "!"
KAFKAJS_COMMITTED = [f"commit-{i}".encode() for i in range(4)]


@requires("kafkajs")
def test_kafkajs_transactions(broker, topic_name, tmp_path):
    """kafkajs' transactional producer: commit, abort, and consume-transform-produce with
    the group's offsets sent to each transaction (committed only with it)."""
    count = 60
    source, sink, ends = ctp_topics(broker, topic_name, count)
    tid, group = f"tx-{source}", f"g-{source}"
    run = KafkaJSTxn(
        tmp_path,
        bootstrap=broker.bootstrap,
        transactional_id=tid,
        source=source,
        sink=sink,
        group=group,
        count=count,
        step=True,
    )
    try:
        run.expect("committed")
        state = describe(broker.bootstrap, tid)
        assert state.transaction_state == "CompleteCommit", state
        epoch = state.producer_epoch
        run.next()
        run.expect("aborted")
        state = describe(broker.bootstrap, tid)
        assert (state.transaction_state, state.producer_epoch) == ("CompleteAbort", epoch), state
        run.next()
        pending = run.expect("pending")
        [[partition, offset]] = pending["offsets"]
        state = describe(broker.bootstrap, tid)
        assert state.transaction_state == "Ongoing", state
        assert [(t.topic, list(t.partitions)) for t in state.topics] == [(sink, [partition])]
        described = broker.cli("transactions", "describe", tid).stdout.decode()
        assert "Ongoing" in described and group in described, described
        # Sent to the transaction, not committed: the group has no offsets yet.
        assert group_offsets(broker.bootstrap, group, source, 2) == {0: -1, 1: -1}
        run.next()
        transformed = run.expect("transformed")
        assert dict(map(tuple, transformed["offsets"])) == ends
        assert offset <= ends[partition]
        assert describe(broker.bootstrap, tid).transaction_state == "CompleteCommit"
        assert group_offsets(broker.bootstrap, group, source, 2) == ends
        run.next()
        run.expect("offsets-aborted")
        assert describe(broker.bootstrap, tid).transaction_state == "CompleteAbort"
        assert group_offsets(broker.bootstrap, group, source, 2) == ends  # not count + 100
        listed = broker.cli("transactions", "list", "--state", "CompleteAbort").stdout.decode()
        assert tid in {line.split()[0] for line in listed.splitlines() if line.strip()}, listed
        run.next()
        run.expect("done")
    finally:
        code = run.close()
    assert code == 0, run.log()
    # Uncommitted reads see every record, aborted ones too.
    expected = KAFKAJS_SINK + [f"{value_of(i)}!".encode() for i in range(count)]
    values = consume_all(broker.bootstrap, sink, 2, "read_uncommitted", len(expected))
    assert sorted(values) == sorted(expected)


@requires("kafkajs")
def test_kafkajs_read_committed_skips_aborted(broker, topic_name, tmp_path):
    count = 20
    source, sink, _ = ctp_topics(broker, topic_name, count)
    run = KafkaJSTxn(
        tmp_path,
        bootstrap=broker.bootstrap,
        transactional_id=f"tx-{source}",
        source=source,
        sink=sink,
        group=f"g-{source}",
        count=count,
        step=False,
    )
    try:
        for ev in ("committed", "aborted", "pending", "transformed", "offsets-aborted", "done"):
            run.expect(ev)
    finally:
        code = run.close()
    assert code == 0, run.log()
    expected = KAFKAJS_COMMITTED + [f"{value_of(i)}!".encode() for i in range(count)]
    values = consume_all(broker.bootstrap, sink, 2, "read_committed", len(expected))
    assert sorted(values) == sorted(expected)


# -- kafka-python -------------------------------------------------------------------------
def kafka_python_ctp(broker, source: str, sink: str, tid: str, count: int, pause=None) -> None:
    """kafka-python 3: a transaction of "kp-commit-I" records committed, one of
    "kp-abort-I" aborted, then consume-transform-produce of the source in ``g-SOURCE``
    (its offsets sent with the consumer's group metadata, KIP-447), one transaction a
    poll, and last a transaction with offsets count + 100 aborted. ``pause(stage)`` is
    called after each stage: "committed", "aborted", "pending" (the first transform
    before its commit), "transformed", "offsets-aborted"."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.structs import OffsetAndMetadata

    pause = pause or (lambda stage: None)
    p = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        transactional_id=tid,
        enable_idempotence=True,
        max_in_flight_requests_per_connection=1,
    )
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=f"g-{source}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    try:
        p.init_transactions()
        for outcome, n in (("commit", 4), ("abort", 3)):
            p.begin_transaction()
            for i in range(n):
                p.send(sink, f"kp-{outcome}-{i}".encode(), partition=i % 2)
            if outcome == "commit":
                p.commit_transaction()
                pause("committed")
            else:
                p.flush()  # an abort drops records not yet sent
                p.abort_transaction()
                pause("aborted")
        consumer.subscribe([source])
        seen, first = 0, True
        deadline = time.monotonic() + 3 * TIMEOUT
        while seen < count:
            assert time.monotonic() < deadline, f"{seen} of {count} source records"
            polled = consumer.poll(timeout_ms=200)
            if not polled:
                continue
            p.begin_transaction()
            offsets = {}
            for tp, records in polled.items():
                for r in records:
                    p.send(sink, r.value + b"!", partition=tp.partition)
                offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "", -1)
                seen += len(records)
            p.send_offsets_to_transaction(offsets, consumer.group_metadata())
            if first:
                first = False
                p.flush()
                pause("pending")
            p.commit_transaction()
        pause("transformed")
        p.begin_transaction()
        p.send(sink, b"kp-late", partition=0)
        late = {
            KafkaTopicPartition(source, part): OffsetAndMetadata(count + 100, "", -1)
            for part in range(2)
        }
        p.send_offsets_to_transaction(late, consumer.group_metadata())
        p.flush()  # an abort drops records not yet sent
        p.abort_transaction()
        pause("offsets-aborted")
    finally:
        consumer.close(autocommit=False)
        p.close(timeout=TIMEOUT)


KAFKA_PYTHON_OWN = [f"kp-commit-{i}".encode() for i in range(4)]
KAFKA_PYTHON_ABORTED = [f"kp-abort-{i}".encode() for i in range(3)] + [b"kp-late"]


@requires("kafka-python")
def test_kafka_python_transactions(broker, topic_name):
    """kafka-python's transactional producer: commit, abort, and consume-transform-produce
    with the consumer's offsets committed only with the transaction."""
    from kafka import KafkaAdminClient

    count = 40
    source, sink, ends = ctp_topics(broker, topic_name, count)
    tid, group = f"tx-{source}", f"g-{source}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    seen: list[str] = []

    def state() -> str:
        return admin.describe_transactions([tid])[tid].state.value

    def pause(stage: str) -> None:
        seen.append(stage)
        if stage == "pending":
            described = admin.describe_transactions([tid])[tid]
            assert described.state.value == "Ongoing", described
            assert {tp.topic for tp in described.topic_partitions} == {sink}, described
            # Not yet the group's (librdkafka's committed() would wait: require_stable).
            assert group_offsets(broker.bootstrap, group, source, 2) == {0: -1, 1: -1}
            return
        offsets = committed_offsets(broker.bootstrap, group, source, 2)
        if stage == "committed":
            assert state() == "CompleteCommit"
        elif stage == "aborted":
            assert state() == "CompleteAbort"
        elif stage == "transformed":
            assert state() == "CompleteCommit"
            assert offsets == ends
        else:
            assert state() == "CompleteAbort"
            assert offsets == ends  # not count + 100
            listed = admin.list_transactions(state_filters=["CompleteAbort"])
            assert tid in {t.transactional_id for ts in listed.values() for t in ts}, listed

    try:
        kafka_python_ctp(broker, source, sink, tid, count, pause)
    finally:
        admin.close()
    assert seen == ["committed", "aborted", "pending", "transformed", "offsets-aborted"]
    expected = (
        KAFKA_PYTHON_OWN + KAFKA_PYTHON_ABORTED + [f"{value_of(i)}!".encode() for i in range(count)]
    )
    values = consume_all(broker.bootstrap, sink, 2, "read_uncommitted", len(expected))
    assert sorted(values) == sorted(expected)


@requires("kafka-python")
def test_kafka_python_read_committed_skips_aborted(broker, topic_name):
    count = 20
    source, sink, _ = ctp_topics(broker, topic_name, count)
    kafka_python_ctp(broker, source, sink, f"tx-{source}", count)
    expected = KAFKA_PYTHON_OWN + [f"{value_of(i)}!".encode() for i in range(count)]
    values = consume_all(broker.bootstrap, sink, 2, "read_committed", len(expected))
    assert sorted(values) == sorted(expected)


def test_more_than_one_batch_per_partition_is_refused(broker, topic_name):
    """Produce v3+ carries exactly one batch per partition (Kafka answers INVALID_RECORD
    otherwise): a transactional batch behind a plain one would slip past the transactional
    id's checks and open a transaction no marker ends, holding the last stable offset."""
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    plain = build_batch([b"plain"])
    hanging = build_batch(
        [b"hang"], producer_id=4242, producer_epoch=0, base_sequence=0, transactional=True
    )
    with Connection(broker.bootstrap) as conn:
        for records in (plain + hanging, plain + plain):
            response = conn.request(
                request(
                    0,
                    7,
                    transactional_id=None,
                    acks=-1,
                    timeout=10_000,
                    topic_data=[
                        {"name": topic, "partition_data": [{"index": 0, "records": records}]}
                    ],
                )
            )
            code = response.responses[0].partition_responses[0].error_code
            assert code == ErrorCode.invalid_record
        assert latest(conn, topic, 0) == latest(conn, topic, 1) == 0  # nothing written


def with_batch_length(batch: bytes, length: int) -> bytes:
    """``batch`` with its batchLength field (bytes 8..12) set to ``length``."""
    return batch[:8] + length.to_bytes(4, "big", signed=True) + batch[12:]


@pytest.mark.parametrize(
    "shrink",
    [
        pytest.param(5, id="5-bytes-short"),  # fewer than a log overhead left after it
        pytest.param(None, id="below-the-header"),  # batchLength 10
    ],
)
def test_one_batch_with_a_short_batch_length_is_still_corrupt_message(broker, topic_name, shrink):
    """One batch whose batchLength field was damaged (smaller than the bytes sent) is not
    taken for two: CORRUPT_MESSAGE, as Kafka answers it (its batch iterator finds no second
    batch in fewer than 12 trailing bytes, and a length below the header is corrupt). A
    client sends a CORRUPT_MESSAGE batch again; INVALID_RECORD fails it for good."""
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    batch = build_batch([b"one", b"two"])
    true_length = int.from_bytes(batch[8:12], "big")
    damaged = with_batch_length(batch, 10 if shrink is None else true_length - shrink)
    with Connection(broker.bootstrap) as conn:
        resp = conn.produce(topic, 0, damaged)
        assert resp.error_code == ErrorCode.corrupt_message, resp
        assert latest(conn, topic, 0) == 0


def test_a_batch_length_short_by_more_than_12_bytes_is_still_corrupt_message(broker, topic_name):
    """One batch whose batchLength is 32 bytes short: Kafka's batch iterator reads a
    'second batch' length inside the record value (0xff..: -1), below 14: CORRUPT_MESSAGE,
    as for any trailing 'batch' that does not fit (then one batch whose CRC fails)."""
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    batch = build_batch([b"\xff" * 64])
    true_length = int.from_bytes(batch[8:12], "big")
    damaged = with_batch_length(batch, true_length - 32)
    second_length = int.from_bytes(damaged[12 + true_length - 32 + 8 :][:4], "big", signed=True)
    assert second_length == -1  # what Kafka reads as the second batch's length
    with Connection(broker.bootstrap) as conn:
        resp = conn.produce(topic, 0, damaged)
        assert resp.error_code == ErrorCode.corrupt_message, resp
        assert latest(conn, topic, 0) == 0
