"""The hand-written Produce request parser (wire/protocol/produce_request.py) reads what kio reads,
for every version the broker accepts, and refuses what kio (with the checks that were
around it) refused."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from tests.kafka_client import encode_request, request
from tests.wire.parsing import assert_truncations_refused
from wire.protocol.array_guard import check_flexible
from wire.protocol.codec import MalformedRequest, _null_array, parse_request, request_schema
from wire.protocol.produce_request import FLEXIBLE_VERSION, MAX_VERSION, MIN_VERSION, parse_produce

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)
SUPPORTED = {0: (0, 12)}
i32 = st.integers(-(2**31), 2**31 - 1)
names = st.text(min_size=0, max_size=20)
# Records of every length class: none (null), empty, and past one- and two-byte varints.
records = st.one_of(
    st.none(), st.binary(max_size=20), st.integers(100, 20_000).map(lambda n: b"r" * n)
)


@st.composite
def produce_requests(draw: st.DrawFn, version: int) -> Any:
    topics = [
        {
            "name": draw(names),
            "partition_data": [
                {"index": draw(i32), "records": draw(records)}
                for _ in range(draw(st.integers(0, 3)))
            ],
        }
        for _ in range(draw(st.integers(0, 3)))
    ]
    return request(
        0,
        version,
        transactional_id=draw(st.one_of(st.none(), names)),
        acks=draw(st.integers(-(2**15), 2**15 - 1)),
        timeout=draw(st.integers(0, 2**31 - 1)),
        topic_data=topics,
    )


def kio_parse(frame: bytes) -> Any:
    """What parse_request did before: kio's readers, the array guard in front, the trailing
    bytes and null-array checks after. Raises what refused the frame."""
    version = struct.unpack_from(">h", frame, 2)[0]
    schema = request_schema(0, version)
    _, used = entity_reader(schema.__header_schema__)(frame, 0)
    if schema.__flexible__:
        check_flexible(schema, frame, used)
    body, size = entity_reader(schema)(frame, used)
    assert used + size == len(frame), "trailing bytes"
    assert _null_array(body) is None, "a null array"
    return body


def same(ours: Any, theirs: Any, version: int) -> None:
    """Every field kio read, ours reads the same."""
    assert ours.version == version
    assert ours.transactional_id == theirs.transactional_id
    assert ours.acks == theirs.acks
    assert ours.timeout == theirs.timeout
    assert [
        (name, [(index, None if data is None else bytes(data)) for index, data in partitions])
        for name, partitions in ours.topic_data
    ] == [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in theirs.topic_data]


def frame_of(req: Any) -> bytes:
    return encode_request(req, 9)[4:]


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_parses_as_kio_does(version: int, data: st.DataObject) -> None:
    frame = frame_of(data.draw(produce_requests(version)))
    parsed = parse_request(frame, SUPPORTED)
    assert parsed.correlation_id == 9
    same(parsed.body, kio_parse(frame), version)
    # A frame read in pieces arrives as a memoryview: read the same, records not copied.
    view = memoryview(bytearray(frame)).toreadonly()
    again = parse_request(view, SUPPORTED).body
    same(again, kio_parse(frame), version)
    for _, partitions in again.topic_data:
        for _, data in partitions:
            assert data is None or data.obj is view.obj


def one_record(version: int, txn_id: str | None = "txn") -> bytes:
    req = request(
        0,
        version,
        transactional_id=txn_id,
        acks=-1,
        timeout=1500,
        topic_data=[
            {"name": "t", "partition_data": [{"index": 0, "records": b"x" * 200}]},
            {"name": "u", "partition_data": [{"index": 1, "records": None}]},
        ],
    )
    return frame_of(req)


@pytest.mark.parametrize("version", VERSIONS)
def test_truncated_frames_are_refused(version: int) -> None:
    assert_truncations_refused(one_record(version), SUPPORTED)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_corrupted_frames_are_read_or_refused_as_kio_did(version: int, data: st.DataObject) -> None:
    frame = bytearray(one_record(version))
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(8, len(frame) - 1))] = data.draw(st.integers(0, 255))
    try:
        theirs = kio_parse(bytes(frame))
    except Exception:
        with pytest.raises(MalformedRequest):
            parse_request(bytes(frame), SUPPORTED)
    else:
        same(parse_request(bytes(frame), SUPPORTED).body, theirs, version)


def test_huge_counts_are_refused_before_allocating() -> None:
    flexible = struct.pack(">hhih", 0, 9, 1, -1) + b"\0" + b"\0" + struct.pack(">hi", 1, 0)
    # topics: 2**31 - 2 as a compact length (a 5-byte varint)
    with pytest.raises(MalformedRequest):
        parse_request(flexible + b"\xff\xff\xff\xff\x07", SUPPORTED)
    one_topic = flexible + b"\x02\x02t" + b"\xff\xff\xff\xff\x07"
    with pytest.raises(MalformedRequest):
        parse_request(one_topic, SUPPORTED)
    legacy = struct.pack(">hhih", 0, 7, 1, -1) + struct.pack(">hhi", -1, 1, 0)
    with pytest.raises(MalformedRequest):
        parse_request(legacy + struct.pack(">i", 2**31 - 1), SUPPORTED)
    with pytest.raises(MalformedRequest):
        parse_request(
            legacy + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">i", 2**30), SUPPORTED
        )


@pytest.mark.parametrize("version", VERSIONS)
def test_null_arrays_and_names_are_refused(version: int) -> None:
    head = struct.pack(">hhih", 0, version, 1, -1)
    if version >= FLEXIBLE_VERSION:
        fixed = head + b"\0" + b"\0" + struct.pack(">hi", 1, 0)
        frames = [fixed + b"\0\0", fixed + b"\x02\x02t\0\0\0", fixed + b"\x02\0\x01\0\0"]
    else:
        fixed = head + struct.pack(">hhi", -1, 1, 0)
        frames = [
            fixed + struct.pack(">i", -1),
            fixed + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">i", -1),
            fixed + struct.pack(">ihi", 1, -1, 0),
        ]
    for frame in frames:
        with pytest.raises(Exception):  # noqa: B017 - kio refused them too, in its own way
            kio_parse(frame)
        with pytest.raises(MalformedRequest):
            parse_request(frame, SUPPORTED)


@pytest.mark.parametrize("version", range(FLEXIBLE_VERSION, MAX_VERSION + 1))
def test_unknown_tagged_fields_are_skipped(version: int) -> None:
    """A tagged field is skipped wherever it comes (Produce has none), as Kafka skips a
    tag it does not know."""
    head = struct.pack(">hhih", 0, version, 1, -1) + b"\0"
    body = b"\0" + struct.pack(">hi", 1, 0) + b"\x02\x02t\x02" + struct.pack(">i", 3)
    tagged = b"\x02\x05\x02ab\x07\x00"  # two fields: tag 5 of 2 bytes, tag 7 empty
    frame = head + body + b"\x04abc" + tagged + tagged + tagged
    ours = parse_request(frame, SUPPORTED).body
    assert [(t, [(p, bytes(d)) for p, d in ps]) for t, ps in ours.topic_data] == [
        ("t", [(3, b"abc")])
    ]
    with pytest.raises(MalformedRequest):  # a tagged field longer than the frame
        parse_request(frame[:-1] + b"\x01\x05\x09ab", SUPPORTED)


@pytest.mark.parametrize("version", [7, 9])
def test_names_that_are_not_utf8_are_refused(version: int) -> None:
    frame = one_record(version).replace(b"txn", b"t\xffn")
    with pytest.raises(Exception):  # noqa: B017 - as kio refused them
        kio_parse(frame)
    with pytest.raises(MalformedRequest):
        parse_request(frame, SUPPORTED)


def test_every_supported_version_is_parsed_by_hand() -> None:
    for version in VERSIONS:
        assert type(parse_request(one_record(version), SUPPORTED).body).__name__ == "ProduceBody"
    with pytest.raises(ValueError):
        parse_produce(b"", 0, MAX_VERSION + 1)
