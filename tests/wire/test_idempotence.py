"""Idempotent produce at the wire level: a retried batch is appended once, a gap in the
sequence numbers is refused."""

from __future__ import annotations

from kafkaesque.records import build_batch, decode_batch
from tests.wire import raw
from tests.wire.common import BASE_TIMESTAMP, cli_records


def values(first: int, count: int) -> list[bytes]:
    return [b"idem-%d" % i for i in range(first, first + count)]


def test_retried_batch_is_not_duplicated(broker, topic_name):
    topic = topic_name()
    with raw.Connection(broker.bootstrap) as conn:
        assert raw.create_topic(conn, topic, 1).error_code == raw.NONE
        producer_id, epoch = raw.init_producer_id(conn)
        assert producer_id >= 0
        assert epoch == 0

        batch = build_batch(
            values(0, 3),
            timestamp=BASE_TIMESTAMP,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=0,
        )
        first = raw.produce(conn, topic, 0, batch)
        assert first.error_code == raw.NONE, first
        assert first.base_offset == 0

        # The client did not see the response and sends the same request again.
        again = raw.produce(conn, topic, 0, batch)
        assert again.error_code in (raw.NONE, raw.DUPLICATE_SEQUENCE_NUMBER), again
        assert again.base_offset == first.base_offset, (first, again)

        # The next batch in sequence lands right after the first one.
        following = build_batch(
            values(3, 2),
            timestamp=BASE_TIMESTAMP,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=3,
        )
        third = raw.produce(conn, topic, 0, following)
        assert third.error_code == raw.NONE, third
        assert third.base_offset == 3

        assert raw.list_offset(conn, topic, 0, -1).offset == 5

    stored = [
        r.value for b in raw.stored_batches(broker.bootstrap, topic, 0) for r in decode_batch(b)
    ]
    assert stored == values(0, 5)
    assert [r.value for r in cli_records(broker, topic)] == values(0, 5)


def test_retried_batch_from_a_new_connection(broker, topic_name):
    """A retry usually comes on a new connection after the old one broke."""
    topic = topic_name()
    with raw.Connection(broker.bootstrap) as conn:
        assert raw.create_topic(conn, topic, 2).error_code == raw.NONE
        producer_id, _ = raw.init_producer_id(conn)
        batch = build_batch(
            values(0, 4), producer_id=producer_id, producer_epoch=0, base_sequence=0
        )
        first = raw.produce(conn, topic, 1, batch)
        assert first.error_code == raw.NONE
    with raw.Connection(broker.bootstrap) as conn:
        again = raw.produce(conn, topic, 1, batch)
        assert again.error_code in (raw.NONE, raw.DUPLICATE_SEQUENCE_NUMBER), again
        assert again.base_offset == first.base_offset
        assert raw.list_offset(conn, topic, 1, -1).offset == 4
        assert raw.list_offset(conn, topic, 0, -1).offset == 0


def test_out_of_order_sequence_is_refused(broker, topic_name):
    topic = topic_name()
    with raw.Connection(broker.bootstrap) as conn:
        assert raw.create_topic(conn, topic, 1).error_code == raw.NONE
        producer_id, _ = raw.init_producer_id(conn)
        first = build_batch(
            values(0, 2), producer_id=producer_id, producer_epoch=0, base_sequence=0
        )
        assert raw.produce(conn, topic, 0, first).error_code == raw.NONE

        # Sequence 2 is next; 5 leaves a gap.
        gap = build_batch(values(5, 2), producer_id=producer_id, producer_epoch=0, base_sequence=5)
        refused = raw.produce(conn, topic, 0, gap)
        assert refused.error_code == raw.OUT_OF_ORDER_SEQUENCE_NUMBER, refused
        assert raw.list_offset(conn, topic, 0, -1).offset == 2

        # The producer still continues from where the log is.
        good = build_batch(values(2, 1), producer_id=producer_id, producer_epoch=0, base_sequence=2)
        ok = raw.produce(conn, topic, 0, good)
        assert ok.error_code == raw.NONE, ok
        assert ok.base_offset == 2


def test_producer_without_state_in_mid_sequence_is_unknown(broker, topic_name):
    """A producer id the partition has no state for that sends a sequence other than 0 (its
    state was lost with Redis' data, or expired) gets UNKNOWN_PRODUCER_ID, which clients
    recover from by bumping their epoch (KIP-360); a new epoch must start at 0."""
    topic = topic_name()
    with raw.Connection(broker.bootstrap) as conn:
        assert raw.create_topic(conn, topic, 1).error_code == raw.NONE
        producer_id, _ = raw.init_producer_id(conn)
        late = build_batch(values(0, 1), producer_id=producer_id, producer_epoch=0, base_sequence=7)
        refused = raw.produce(conn, topic, 0, late)
        assert refused.error_code == raw.UNKNOWN_PRODUCER_ID, refused
        assert raw.list_offset(conn, topic, 0, -1).offset == 0
        first = build_batch(
            values(0, 1), producer_id=producer_id, producer_epoch=0, base_sequence=0
        )
        assert raw.produce(conn, topic, 0, first).error_code == raw.NONE
        bumped = build_batch(
            values(1, 1), producer_id=producer_id, producer_epoch=1, base_sequence=3
        )
        refused = raw.produce(conn, topic, 0, bumped)
        assert refused.error_code == raw.OUT_OF_ORDER_SEQUENCE_NUMBER, refused
        assert raw.list_offset(conn, topic, 0, -1).offset == 1


def test_producers_keep_separate_sequences(broker, topic_name):
    topic = topic_name()
    with raw.Connection(broker.bootstrap) as conn:
        assert raw.create_topic(conn, topic, 1).error_code == raw.NONE
        a, _ = raw.init_producer_id(conn)
        b, _ = raw.init_producer_id(conn)
        assert a != b
        for pid, seq in ((a, 0), (b, 0), (a, 1)):
            batch = build_batch([b"x"], producer_id=pid, producer_epoch=0, base_sequence=seq)
            resp = raw.produce(conn, topic, 0, batch)
            assert resp.error_code == raw.NONE, (pid, seq, resp)
        assert raw.list_offset(conn, topic, 0, -1).offset == 3
