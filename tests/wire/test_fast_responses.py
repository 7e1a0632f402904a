"""The hand-written Produce and Fetch encoders write exactly kio's bytes, for every version
the broker answers, or leave the response to kio."""

from __future__ import annotations

import dataclasses
import datetime
import random
import uuid

import pytest
from kio.schema.errors import ErrorCode

from wire.net.throttling import with_throttle
from wire.protocol.codec import (
    build,
    encode_response,
    kio_response,
    response_pieces,
    response_schema,
    schema_class,
)
from wire.protocol.fast_responses import (
    EncodedTopic,
    FetchAnswer,
    ProduceAnswer,
    fetch_partition,
    fetch_response,
    produce_response,
)

CODES = [ErrorCode.none, ErrorCode.offset_out_of_range, ErrorCode.unknown_topic_or_partition]


def fetch_entity(version: int, rng: random.Random, **partition_extra) -> object:
    schema = response_schema(1, version)
    topic_class = schema_class(schema, "FetchableTopicResponse")
    partition_class = schema_class(schema, "PartitionData")
    aborted_class = schema_class(schema, "AbortedTransaction")

    def partition(i: int) -> object:
        records = rng.choice((None, b"", rng.randbytes(rng.choice((10, 300, 20_000)))))
        aborted = rng.choice(
            (
                None,
                (),
                tuple(
                    build(aborted_class, producer_id=rng.randrange(1 << 40), first_offset=j)
                    for j in range(rng.randrange(1, 4))
                ),
            )
        )
        return build(
            partition_class,
            partition_index=i,
            error_code=rng.choice(CODES),
            high_watermark=rng.randrange(-1, 1 << 40),
            last_stable_offset=rng.randrange(-1, 1 << 40),
            log_start_offset=rng.randrange(-1, 1 << 20),
            aborted_transactions=aborted,
            preferred_read_replica=-1,
            records=records,
            **partition_extra,
        )

    topics = tuple(
        build(
            topic_class,
            topic=rng.choice(("t", "topic-é", "x" * 200)),
            # None: a request naming a null topic id is answered with the zero uuid.
            topic_id=rng.choice((uuid.UUID(int=rng.getrandbits(128)), None)),
            partitions=tuple(partition(i) for i in range(rng.choice((0, 1, 3, 130)))),
        )
        for _ in range(rng.choice((0, 1, 2)))
    )
    return build(
        schema,
        throttle_time=datetime.timedelta(milliseconds=rng.choice((0, 7, 1500))),
        error_code=rng.choice(CODES),
        session_id=rng.choice((0, 12345)),
        responses=topics,
    )


def produce_entity(version: int, rng: random.Random) -> object:
    schema = response_schema(0, version)
    topic_class = schema_class(schema, "TopicProduceResponse")
    partition_class = schema_class(schema, "PartitionProduceResponse")
    error_class = schema_class(schema, "BatchIndexAndErrorMessage") if version >= 8 else None

    def partition(i: int) -> object:
        append_time = rng.choice(
            (None, datetime.datetime.fromtimestamp(1_700_000_000.123, datetime.UTC))
        )
        errors = ()
        if error_class is not None and rng.random() < 0.3:
            errors = tuple(
                build(error_class, batch_index=j, batch_index_error_message=rng.choice((None, "x")))
                for j in range(2)
            )
        return build(
            partition_class,
            index=i,
            error_code=rng.choice(CODES),
            base_offset=rng.randrange(-1, 1 << 40),
            log_append_time=append_time,
            log_start_offset=rng.randrange(-1, 1 << 30),
            record_errors=errors,
            error_message=rng.choice((None, "", "bad batch")),
        )

    return build(
        schema,
        throttle_time=datetime.timedelta(milliseconds=rng.choice((0, 3))),
        responses=tuple(
            build(
                topic_class,
                name=rng.choice(("t", "topic-é")),
                partition_responses=tuple(partition(i) for i in range(rng.choice((1, 2, 5)))),
            )
            for _ in range(rng.choice((0, 1, 3)))
        ),
    )


@pytest.mark.parametrize("version", range(4, 18))
def test_fetch_responses_are_kio_bytes(version):
    rng = random.Random(version)
    for _ in range(30):
        response = fetch_entity(version, rng)
        pieces = fetch_response(2**31 - 1, response)
        assert pieces is not None
        assert b"".join(pieces) == kio_response(2**31 - 1, response)
        assert encode_response(5, response) == kio_response(5, response)


@pytest.mark.parametrize("version", range(3, 13))
def test_produce_responses_are_kio_bytes(version):
    rng = random.Random(version)
    for _ in range(30):
        response = produce_entity(version, rng)
        pieces = produce_response(-7, response)
        assert pieces is not None
        assert b"".join(pieces) == kio_response(-7, response)


@pytest.mark.parametrize("version", range(3, 13))
def test_produce_answers_are_kio_bytes(version):
    """The handler's ProduceAnswer writes the bytes of kio's entity of the same values,
    throttled too (the quotas replace its throttle_time)."""
    rng = random.Random(version)
    for _ in range(30):
        entity = produce_entity(version, rng)
        answer = ProduceAnswer(
            version,
            entity.throttle_time,
            tuple(
                (
                    t.name,
                    tuple(
                        (
                            p.index,
                            p.error_code.value,
                            p.base_offset,
                            -1
                            if p.log_append_time is None
                            else round(p.log_append_time.timestamp() * 1000),
                            getattr(p, "log_start_offset", -1),
                            tuple(
                                (e.batch_index, e.batch_index_error_message)
                                for e in getattr(p, "record_errors", ())
                            ),
                            getattr(p, "error_message", None),
                        )
                        for p in t.partition_responses
                    ),
                )
                for t in entity.responses
            ),
        )
        assert encode_response(-7, answer) == kio_response(-7, entity)
        throttled = with_throttle(answer, 9)
        again = with_throttle(entity, 9)
        assert encode_response(3, throttled) == kio_response(3, again)


def test_records_are_a_piece_of_their_own():
    schema = response_schema(1, 16)
    records = b"r" * 100_000
    partition = build(
        schema_class(schema, "PartitionData"),
        partition_index=0,
        error_code=ErrorCode.none,
        high_watermark=1,
        aborted_transactions=None,
        records=records,
    )
    topic = build(
        schema_class(schema, "FetchableTopicResponse"),
        topic_id=uuid.uuid4(),
        partitions=(partition,),
    )
    response = build(
        schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, responses=(topic,)
    )
    pieces = response_pieces(1, response)
    assert any(piece is records for piece in pieces)  # not copied
    assert b"".join(pieces) == kio_response(1, response)


@pytest.mark.parametrize("version", [12, 16, 17])
def test_tagged_fields_are_left_to_kio(version):
    schema = response_schema(1, version)
    leader = build(schema_class(schema, "LeaderIdAndEpoch"), leader_id=0, leader_epoch=3)
    response = fetch_entity(version, random.Random(1), current_leader=leader)
    if any(t.partitions for t in response.responses):
        assert fetch_response(1, response) is None
    assert response_pieces(1, response) == [kio_response(1, response)]
    if version < 16:
        return
    endpoint = build(schema_class(schema, "NodeEndpoint"), node_id=0, host="h", port=1)
    with_endpoints = build(
        schema,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        responses=(),
        node_endpoints=(endpoint,),
    )
    assert fetch_response(1, with_endpoints) is None
    assert response_pieces(1, with_endpoints) == [kio_response(1, with_endpoints)]


@pytest.mark.parametrize("version", range(4, 18))
def test_fetch_answers_are_kio_bytes(version):
    """A FetchAnswer of entries from fetch_partition is what kio writes of the same
    response (aborted transactions and records as empty, not null, when there are none)."""
    rng = random.Random(version)
    for _ in range(20):
        response = fetch_entity(version, rng)
        encoded = []
        for topic in response.responses:
            pieces = []
            for p in topic.partitions:
                aborted = [
                    (a.producer_id, a.first_offset, -1) for a in p.aborted_transactions or ()
                ]
                records = p.records or b""
                batches = [records[:5], records[5:]] if records else []
                pieces += fetch_partition(
                    version,
                    p.partition_index,
                    p.error_code.value,
                    p.high_watermark,
                    p.last_stable_offset,
                    getattr(p, "log_start_offset", -1),  # v5+
                    aborted,
                    batches,
                )
            encoded.append(
                EncodedTopic(
                    getattr(topic, "topic", None),
                    getattr(topic, "topic_id", None),
                    len(topic.partitions),
                    pieces,
                )
            )
        answer = FetchAnswer(
            version,
            response.throttle_time,
            getattr(response, "error_code", ErrorCode.none).value,  # v7+
            getattr(response, "session_id", 0),
            tuple(encoded),
        )
        # kio's view of the same response: nulls written as empty, as the handler sends.
        expected = dataclasses.replace(
            response,
            responses=tuple(
                dataclasses.replace(
                    t,
                    partitions=tuple(
                        dataclasses.replace(
                            p,
                            aborted_transactions=p.aborted_transactions or (),
                            records=p.records or b"",
                        )
                        for p in t.partitions
                    ),
                )
                for t in response.responses
            ),
        )
        assert b"".join(response_pieces(3, answer)) == kio_response(3, expected)
