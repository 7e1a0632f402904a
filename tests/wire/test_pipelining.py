"""Produce requests sent back to back on one connection: the broker starts each before the
earlier ones have answered (wire.net.connection.Connection._pipelined), yet answers them in order
and
appends their records in the order they were sent, as Kafka's one-at-a-time handling does."""

from __future__ import annotations

import signal
import time

from kio.schema.errors import ErrorCode

from kafkaesque.records.batch import iter_records
from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection, metadata_request, produce_request
from tests.wire.conftest import Broker

REQUESTS = 300


def test_back_to_back_produce_requests_answer_and_append_in_order(broker: Broker) -> None:
    topic = "pipelined"
    with Connection(broker.bootstrap) as conn:
        conn.create_topic(topic, partitions=2)
        sent = []  # (correlation id, request, partition or None, value)
        for i in range(REQUESTS):
            partition = i % 2
            if i % 50 == 25:  # a Metadata request among them waits for those before it
                req = metadata_request([topic])
                sent.append((conn.send_request(req), req, None, None))
                continue
            value = f"{i}".encode()
            records = build_batch([value]) if i % 37 else b"\0" * 80  # some refused
            req = produce_request(topic, {partition: records}, acks=1)
            sent.append((conn.send_request(req), req, partition, value if i % 37 else None))
        offsets: dict[int, list[int]] = {0: [], 1: []}
        for correlation_id, req, partition, value in sent:
            # read_response checks the correlation id: answers come in the order sent.
            response = conn.read_response(req, correlation_id)
            if partition is None:
                assert [t.name for t in response.topics] == [topic]
                continue
            [answer] = response.responses[0].partition_responses
            if value is None:
                assert answer.error_code == ErrorCode.invalid_record
                continue
            assert answer.error_code == ErrorCode.none
            offsets[partition].append(answer.base_offset)
        for partition in (0, 1):
            assert offsets[partition] == list(range(len(offsets[partition])))
            stored = conn.fetch(topic, partition, 0, max_bytes=1 << 20)
            values = [int(r.value) for r in iter_records([stored.records])]
            expected = [
                i for i in range(REQUESTS) if i % 2 == partition and i % 50 != 25 and i % 37
            ]
            assert values == expected


def test_a_failing_request_in_a_pipeline_closes_only_its_connection(broker: Broker) -> None:
    """A malformed Produce among pipelined ones: the ones before it answer, the connection
    closes, and the broker serves the next connection."""
    topic = "pipelined-bad"
    with Connection(broker.bootstrap) as conn:
        conn.create_topic(topic)
        good = produce_request(topic, {0: build_batch([b"a"])}, acks=1)
        first = conn.send_request(good)
        conn.send(b"\0\0\0\x0a\0\0\0\x07\0\0\0\x09\0\0")  # Produce v7, cut short
        response = conn.read_response(good, first)
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert conn.read_frame() is None
    with Connection(broker.bootstrap) as conn:
        assert conn.produce(topic, 0, build_batch([b"b"])).error_code == ErrorCode.none


def test_sigterm_closes_a_connection_idle_after_pipelined_requests_at_once(
    broker_factory,
) -> None:
    """A producer idle after its pipelined requests were answered holds nothing in flight:
    SIGTERM closes its connection at once instead of waiting out the shutdown grace."""
    broker = broker_factory()
    topic = "pipelined-stop"
    with Connection(broker.bootstrap) as conn:
        conn.create_topic(topic)
        requests = [produce_request(topic, {0: build_batch([b"x"])}, acks=1) for _ in range(20)]
        sent = [(conn.send_request(req), req) for req in requests]
        for correlation_id, req in sent:
            response = conn.read_response(req, correlation_id)
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
        started = time.monotonic()
        assert broker.stop() in (0, -signal.SIGTERM)
        assert time.monotonic() - started < 5  # the grace for busy connections is 10 s
