"""Idempotent produce at the wire level: a retried batch is appended once, a gap in the
sequence numbers is refused."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kafkaesque.records.batch import decode_batch
from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection
from tests.wire.common import BASE_TIMESTAMP, cli_records, stored_batches


def values(first: int, count: int) -> list[bytes]:
    return [b"idem-%d" % i for i in range(first, first + count)]


def test_retried_batch_is_not_duplicated(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
        producer_id, epoch = conn.init_producer_id()
        assert producer_id >= 0
        assert epoch == 0

        batch = build_batch(
            values(0, 3),
            timestamp=BASE_TIMESTAMP,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=0,
        )
        first = conn.produce(topic, 0, batch)
        assert first.error_code == ErrorCode.none, first
        assert first.base_offset == 0

        # The client did not see the response and sends the same request again.
        again = conn.produce(topic, 0, batch)
        assert again.error_code in (ErrorCode.none, ErrorCode.duplicate_sequence_number), again
        assert again.base_offset == first.base_offset, (first, again)

        # The next batch in sequence lands right after the first one.
        following = build_batch(
            values(3, 2),
            timestamp=BASE_TIMESTAMP,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=3,
        )
        third = conn.produce(topic, 0, following)
        assert third.error_code == ErrorCode.none, third
        assert third.base_offset == 3

        assert conn.list_offset(topic, 0, -1).offset == 5

    stored = [r.value for b in stored_batches(broker.bootstrap, topic, 0) for r in decode_batch(b)]
    assert stored == values(0, 5)
    assert [r.value for r in cli_records(broker, topic)] == values(0, 5)


def test_retried_batch_from_a_new_connection(broker, topic_name):
    """A retry usually comes on a new connection after the old one broke."""
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 2).error_code == ErrorCode.none
        producer_id, _ = conn.init_producer_id()
        batch = build_batch(
            values(0, 4), producer_id=producer_id, producer_epoch=0, base_sequence=0
        )
        first = conn.produce(topic, 1, batch)
        assert first.error_code == ErrorCode.none
    with Connection(broker.bootstrap) as conn:
        again = conn.produce(topic, 1, batch)
        assert again.error_code in (ErrorCode.none, ErrorCode.duplicate_sequence_number), again
        assert again.base_offset == first.base_offset
        assert conn.list_offset(topic, 1, -1).offset == 4
        assert conn.list_offset(topic, 0, -1).offset == 0


def test_out_of_order_sequence_is_refused(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
        producer_id, _ = conn.init_producer_id()
        first = build_batch(
            values(0, 2), producer_id=producer_id, producer_epoch=0, base_sequence=0
        )
        assert conn.produce(topic, 0, first).error_code == ErrorCode.none

        # Sequence 2 is next; 5 leaves a gap: "not yet", a retriable error that writes
        # nothing, so the client sends the earlier batch first and keeps its epoch.
        gap = build_batch(values(5, 2), producer_id=producer_id, producer_epoch=0, base_sequence=5)
        refused = conn.produce(topic, 0, gap)
        assert refused.error_code == ErrorCode.not_enough_replicas, refused
        assert conn.list_offset(topic, 0, -1).offset == 2

        # A sequence behind the producer's last batches is out of order.
        stale = build_batch(
            values(1, 1), producer_id=producer_id, producer_epoch=0, base_sequence=1
        )
        refused = conn.produce(topic, 0, stale)
        assert refused.error_code == ErrorCode.out_of_order_sequence_number, refused
        assert conn.list_offset(topic, 0, -1).offset == 2

        # The producer still continues from where the log is.
        good = build_batch(values(2, 1), producer_id=producer_id, producer_epoch=0, base_sequence=2)
        ok = conn.produce(topic, 0, good)
        assert ok.error_code == ErrorCode.none, ok
        assert ok.base_offset == 2


def test_producer_without_state_in_mid_sequence_is_unknown(broker, topic_name):
    """A producer id the partition has no state for that sends a sequence other than 0 (its
    state was lost with Redis' data, or expired) gets UNKNOWN_PRODUCER_ID, which clients
    recover from by bumping their epoch (KIP-360); a new epoch must start at 0."""
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
        producer_id, _ = conn.init_producer_id()
        late = build_batch(values(0, 1), producer_id=producer_id, producer_epoch=0, base_sequence=7)
        refused = conn.produce(topic, 0, late)
        assert refused.error_code == ErrorCode.unknown_producer_id, refused
        assert conn.list_offset(topic, 0, -1).offset == 0
        first = build_batch(
            values(0, 1), producer_id=producer_id, producer_epoch=0, base_sequence=0
        )
        assert conn.produce(topic, 0, first).error_code == ErrorCode.none
        bumped = build_batch(
            values(1, 1), producer_id=producer_id, producer_epoch=1, base_sequence=3
        )
        refused = conn.produce(topic, 0, bumped)
        assert refused.error_code == ErrorCode.out_of_order_sequence_number, refused
        assert conn.list_offset(topic, 0, -1).offset == 1


def test_producers_keep_separate_sequences(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
        a, _ = conn.init_producer_id()
        b, _ = conn.init_producer_id()
        assert a != b
        for pid, seq in ((a, 0), (b, 0), (a, 1)):
            batch = build_batch([b"x"], producer_id=pid, producer_epoch=0, base_sequence=seq)
            resp = conn.produce(topic, 0, batch)
            assert resp.error_code == ErrorCode.none, (pid, seq, resp)
        assert conn.list_offset(topic, 0, -1).offset == 3
