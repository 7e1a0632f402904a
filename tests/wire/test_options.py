"""``serve`` options: auto-creation of topics and their default partition count."""

from __future__ import annotations

import signal
import time

from kio.schema.errors import ErrorCode

from tests.kafka_client import Connection, fetch_request


def test_auto_create_with_default_partitions(broker_factory, topic_name):
    broker = broker_factory("--default-partitions", "3")
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        (t,) = conn.metadata([topic], auto_create=True).topics
        assert t.error_code == ErrorCode.none, t
        assert sorted(p.partition_index for p in t.partitions) == [0, 1, 2]
        # Not asked to create: an unknown topic stays unknown.
        (u,) = conn.metadata([topic_name()], auto_create=False).topics
        assert u.error_code == ErrorCode.unknown_topic_or_partition
    assert broker.cli("topics").stdout.decode().split().count(topic) == 1


def test_no_auto_create_topics(broker_factory, topic_name):
    broker = broker_factory("--no-auto-create-topics")
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        (t,) = conn.metadata([topic], auto_create=True).topics
        assert t.error_code == ErrorCode.unknown_topic_or_partition, t
        # Explicit creation still works.
        assert conn.create_topic(topic, 2).error_code == ErrorCode.none
        (t,) = conn.metadata([topic], auto_create=True).topics
        assert t.error_code == ErrorCode.none
        assert len(t.partitions) == 2


def test_metadata_advertises_the_listen_port(broker_factory):
    broker = broker_factory()
    with Connection(broker.bootstrap) as conn:
        resp = conn.metadata(None)
    (b,) = resp.brokers
    assert (b.node_id, b.host, b.port) == (0, "127.0.0.1", broker.port)
    assert resp.controller_id == 0
    assert resp.cluster_id


def test_sigterm_answers_a_waiting_fetch_and_exits(broker_factory, topic_name):
    """A fetch long-polling at the log end is answered at shutdown; the process exits 0."""
    broker = broker_factory()
    topic = topic_name()
    with Connection(broker.bootstrap, timeout=20) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
        waiting = conn.send_request(fetch_request(topic, {0: 0}, max_wait_ms=15_000, min_bytes=1))
        time.sleep(0.5)  # the fetch is now waiting for records
        started = time.monotonic()
        broker.proc.send_signal(signal.SIGTERM)
        reply = conn.read_frame()
        elapsed = time.monotonic() - started
    assert elapsed < 10, f"the waiting fetch took {elapsed:.1f} s to end after SIGTERM"
    if reply is not None:
        assert reply[:4] == waiting.to_bytes(4, "big")
    assert broker.proc.wait(15) == 0
