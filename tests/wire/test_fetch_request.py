"""The hand-written Fetch request parser (wire/protocol/fetch_request.py) reads what kio reads, for
every version the broker accepts, and refuses what cannot be a Fetch request."""

from __future__ import annotations

import io
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer

from tests.kafka_client import encode_request, request
from tests.wire.parsing import assert_truncations_refused
from wire.protocol.codec import MalformedRequest, parse_request
from wire.protocol.fetch_request import FLEXIBLE_VERSION, parse_fetch

VERSIONS = range(4, 18)
SUPPORTED = {1: (4, 17)}
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(min_size=0, max_size=20)
ids = st.one_of(st.none(), st.uuids())


def partitions(version: int) -> st.SearchStrategy[dict[str, Any]]:
    fields: dict[str, st.SearchStrategy[Any]] = {
        "partition": i32,
        "current_leader_epoch": i32,
        "fetch_offset": i64,
        "last_fetched_epoch": i32,
        "log_start_offset": i64,
        "partition_max_bytes": i32,
    }
    if version >= 17:  # a tagged field: sends the entry down the general path
        fields["replica_directory_id"] = ids
    return st.fixed_dictionaries(fields)


def topics(version: int) -> st.SearchStrategy[dict[str, Any]]:
    key = "topic_id" if version >= 13 else "topic"
    return st.fixed_dictionaries(
        {
            key: ids if version >= 13 else names,
            "partitions": st.lists(partitions(version), max_size=6),
        }
    )


def forgotten(version: int) -> st.SearchStrategy[dict[str, Any]]:
    key = "topic_id" if version >= 13 else "topic"
    return st.fixed_dictionaries(
        {key: ids if version >= 13 else names, "partitions": st.lists(i32, max_size=4)}
    )


@st.composite
def fetch_requests(draw: st.DrawFn, version: int) -> Any:
    fields: dict[str, Any] = {
        "max_wait": draw(st.integers(0, 2**31 - 1)),
        "min_bytes": draw(i32),
        "max_bytes": draw(i32),
        "isolation_level": draw(st.integers(-128, 127)),
        "session_id": draw(i32),
        "session_epoch": draw(i32),
        "topics": draw(st.lists(topics(version), max_size=3)),
        "forgotten_topics_data": draw(st.lists(forgotten(version), max_size=2)),
        "rack_id": draw(names),
    }
    if version < 15:
        fields["replica_id"] = draw(i32)
    else:
        state = draw(st.one_of(st.none(), st.tuples(i32, i64)))
        if state is not None:
            fields["replica_state"] = {"replica_id": state[0], "replica_epoch": state[1]}
    if version >= FLEXIBLE_VERSION:
        fields["cluster_id"] = draw(st.one_of(st.none(), names))
    return request(1, version, **fields)


def body_bytes(req: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(req))(buf, req)
    return buf.getvalue()


def same(ours: Any, theirs: Any, version: int) -> None:
    """Every field kio read, ours reads the same."""
    assert ours.version == version
    assert ours.max_wait == theirs.max_wait
    assert (ours.min_bytes, ours.max_bytes) == (theirs.min_bytes, theirs.max_bytes)
    assert ours.isolation_level == theirs.isolation_level
    assert ours.session_id == getattr(theirs, "session_id", 0)
    assert ours.session_epoch == getattr(theirs, "session_epoch", -1)
    assert ours.rack_id == getattr(theirs, "rack_id", "")
    assert ours.cluster_id == getattr(theirs, "cluster_id", None)
    if version >= 15:
        state = theirs.replica_state
        assert (ours.replica_state.replica_id, ours.replica_state.replica_epoch) == (
            state.replica_id,
            state.replica_epoch,
        )
        assert ours.replica_id == state.replica_id
    else:
        assert ours.replica_id == theirs.replica_id
    assert len(ours.topics) == len(theirs.topics)
    for mine, kio in zip(ours.topics, theirs.topics, strict=True):
        assert mine.topic == getattr(kio, "topic", None)
        assert mine.topic_id == getattr(kio, "topic_id", None)
        expected = [
            (
                p.partition,
                getattr(p, "current_leader_epoch", -1),
                p.fetch_offset,
                getattr(p, "last_fetched_epoch", -1),
                getattr(p, "log_start_offset", -1),
                p.partition_max_bytes,
                getattr(p, "replica_directory_id", None),
            )
            for p in kio.partitions
        ]
        got = [tuple(p) for p in mine.partitions]
        if version >= 17:  # kept by partition index: the last entry of an index wins
            last = {e[0]: e[6] for e in expected}
            expected = [(*e[:6], last[e[0]]) for e in expected]
        assert got == expected
    theirs_forgotten = getattr(theirs, "forgotten_topics_data", ())
    assert [(f.topic, f.topic_id, list(f.partitions)) for f in ours.forgotten_topics_data] == [
        (getattr(f, "topic", None), getattr(f, "topic_id", None), list(f.partitions))
        for f in theirs_forgotten
    ]


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_parses_as_kio_does(version: int, data: st.DataObject) -> None:
    req = data.draw(fetch_requests(version))
    body = body_bytes(req)
    theirs, used = entity_reader(type(req))(body, 0)
    ours, end = parse_fetch(body, 0, version)
    assert end == used == len(body)
    same(ours, theirs, version)
    # And through parse_request, as the server calls it.
    parsed = parse_request(encode_request(req, 9)[4:], SUPPORTED)
    assert parsed.correlation_id == 9
    same(parsed.body, theirs, version)


def many_partitions(version: int, n: int = 300) -> bytes:
    key = {"topic_id": uuid.uuid4()} if version >= 13 else {"topic": "t"}
    parts = [
        {"partition": p, "fetch_offset": p * 7, "partition_max_bytes": 1 << 20} for p in range(n)
    ]
    req = request(
        1,
        version,
        max_wait=500,
        min_bytes=1,
        topics=[{**key, "partitions": parts}],
        forgotten_topics_data=[],
    )
    return encode_request(req, 1)[4:]


@pytest.mark.parametrize("version", VERSIONS)
def test_many_partitions(version: int) -> None:
    parsed = parse_request(many_partitions(version), SUPPORTED).body
    (topic,) = parsed.topics
    assert [(p.partition, p.fetch_offset) for p in topic.partitions] == [
        (p, p * 7) for p in range(300)
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_truncated_frames_are_refused(version: int) -> None:
    assert_truncations_refused(many_partitions(version, 3), SUPPORTED)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_corrupted_frames_parse_or_are_refused(version: int, data: st.DataObject) -> None:
    frame = bytearray(many_partitions(version, 4))
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(8, len(frame) - 1))] = data.draw(st.integers(0, 255))
    try:
        parse_request(bytes(frame), SUPPORTED)
    except MalformedRequest:
        pass


def test_huge_counts_are_refused_before_allocating() -> None:
    head = struct.pack(">hhih", 1, 12, 1, -1) + b"\0"  # Fetch v12, header v2, null client
    fixed = struct.pack(">iiiiibii", -1, 500, 1, 1 << 20, 0, 0, 0, -1)[:25]
    # topics: 2**31 - 2 as a compact length (a 5-byte varint)
    frame = head + fixed + b"\xff\xff\xff\xff\x07"
    with pytest.raises(MalformedRequest):
        parse_request(frame, SUPPORTED)
    legacy = struct.pack(">hhih", 1, 11, 1, -1) + struct.pack(">iiiibii", -1, 500, 1, 1, 0, 0, -1)
    with pytest.raises(MalformedRequest):
        parse_request(legacy + struct.pack(">i", 2**31 - 1), SUPPORTED)
    one_topic = legacy + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">i", 2**30)
    with pytest.raises(MalformedRequest):
        parse_request(one_topic, SUPPORTED)


def test_unknown_tagged_fields_are_skipped() -> None:
    """A tagged field this broker does not know is skipped, in an entry (which then takes
    the general path) and at the end of the request, as Kafka skips them."""
    req = request(
        1,
        12,
        max_wait=500,
        min_bytes=1,
        topics=[
            {
                "topic": "t",
                "partitions": [
                    {"partition": p, "fetch_offset": p, "partition_max_bytes": 9} for p in range(3)
                ],
            }
        ],
        forgotten_topics_data=[],
    )
    body = bytearray(body_bytes(req))
    # The second entry (33 bytes each, after the topic "t" and the count) gets a tag 5 of
    # two bytes; the request's own tagged fields get a tag 9 of one byte.
    first = 4 + 4 + 4 + 4 + 1 + 4 + 4 + 1 + 2 + 1
    tag_at = first + 33 + 32
    assert body[tag_at] == 0
    body[tag_at : tag_at + 1] = b"\x01\x05\x02ab"
    assert body[-1] == 0
    body[-1:] = b"\x01\x09\x01z"
    parsed, end = parse_fetch(bytes(body), 0, 12)
    assert end == len(body)
    assert [
        (p.partition, p.fetch_offset, p.partition_max_bytes) for p in parsed.topics[0].partitions
    ] == [(p, p, 9) for p in range(3)]


def test_the_last_entry_of_a_partition_index_wins_its_directory_id() -> None:
    """v17: two entries of one partition, the first with a replica directory id and the
    last without: the partition has none (as the last entry of an index wins its fields);
    found by the property test above."""
    entry = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
    directory = uuid.uuid4()

    def directories(partitions: list[dict[str, Any]]) -> list[uuid.UUID | None]:
        topics = [{"topic_id": uuid.uuid4(), "partitions": partitions}]
        req = request(1, 17, max_wait=0, min_bytes=0, topics=topics, forgotten_topics_data=[])
        (topic,) = parse_request(encode_request(req, 1)[4:], SUPPORTED).body.topics
        return [p.replica_directory_id for p in topic.partitions]

    assert directories([{**entry, "replica_directory_id": directory}, entry]) == [None, None]
    assert directories([entry, {**entry, "replica_directory_id": directory}]) == [
        directory,
        directory,
    ]
