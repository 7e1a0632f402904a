"""Bad bytes on raw sockets: the server answers with an error or closes that connection, and
keeps serving new ones."""

from __future__ import annotations

import random
import socket
import struct

import pytest
from kio.schema.errors import ErrorCode

from kafkaesque.records.batch import decode_batch
from kafkaesque.records.build import build_batch
from tests.kafka_client import (
    Connection,
    decode_response,
    encode_request,
    parse_address,
    produce_request,
    request,
)


def assert_still_serving(broker) -> None:
    """A new connection gets an ApiVersions answer."""
    with Connection(broker.bootstrap) as conn:
        resp = conn.api_versions(0)
    assert resp.error_code == ErrorCode.none
    assert {k.api_key for k in resp.api_keys} >= {0, 1, 3, 18}


def frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    """A request frame with header v1 (client id "bad") and the given body bytes."""
    header = struct.pack(">hhih", api_key, version, correlation_id, 3) + b"bad"
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_api_versions_round_trip(broker):
    with Connection(broker.bootstrap) as conn:
        for version in range(5):
            resp = conn.api_versions(version)
            assert resp.error_code == ErrorCode.none, (version, resp)
            ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            assert ranges[18][0] == 0 and ranges[18][1] >= 3
            assert ranges[0][1] >= 7  # Produce
            assert ranges[1][0] <= 4 <= ranges[1][1]  # Fetch


def test_truncated_frame_then_close(broker):
    with socket.create_connection(parse_address(broker.bootstrap), timeout=5) as s:
        s.sendall(struct.pack(">i", 100) + frame(18, 0, 1)[4:14])
    assert_still_serving(broker)


def test_truncated_frame_then_half_close(broker):
    with Connection(broker.bootstrap) as conn:
        conn.send(struct.pack(">i", 100) + b"\x00\x12\x00\x00")
        conn.sock.shutdown(socket.SHUT_WR)
        assert conn.closed_by_server()
    assert_still_serving(broker)


@pytest.mark.parametrize("size", [200 * 1024 * 1024, 2**31 - 1, -1, -(2**31), 0])
def test_frame_size_out_of_range_closes_the_connection(broker, size):
    with Connection(broker.bootstrap, timeout=5) as conn:
        conn.send(struct.pack(">i", size) + b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")
        assert conn.closed_by_server(), f"size prefix {size}: the connection stays open"
    assert_still_serving(broker)


def test_random_garbage(broker):
    rng = random.Random(20240611)
    for _ in range(5):
        garbage = rng.randbytes(1024)
        with Connection(broker.bootstrap, timeout=5) as conn:
            conn.send(garbage)
            conn.sock.shutdown(socket.SHUT_WR)
            # Whatever the server makes of it, it must end the connection.
            while True:
                try:
                    data = conn.sock.recv(65536)
                except ConnectionResetError:
                    break
                if not data:
                    break
    assert_still_serving(broker)


def test_garbage_inside_a_well_sized_frame(broker):
    rng = random.Random(7)
    for api_key, version in [(0, 7), (1, 11), (3, 4), (18, 3), (19, 3)]:
        body = rng.randbytes(1000)
        with Connection(broker.bootstrap, timeout=5) as conn:
            conn.send(frame(api_key, version, 42, body))
            reply = _reply_or_close(conn)
            if reply is not None:
                (correlation_id,) = struct.unpack_from(">i", reply)
                assert correlation_id == 42
    assert_still_serving(broker)


def _reply_or_close(conn: Connection) -> bytes | None:
    try:
        return conn.read_frame()
    except ConnectionResetError:
        return None


@pytest.mark.parametrize("api_key", [999, 77, -1])
def test_unknown_api_key(broker, api_key):
    """Kafka closes the connection; an error response is acceptable too."""
    with Connection(broker.bootstrap, timeout=5) as conn:
        conn.send(frame(api_key, 0, 5))
        reply = _reply_or_close(conn)
        if reply is not None:
            (correlation_id,) = struct.unpack_from(">i", reply)
            assert correlation_id == 5
    assert_still_serving(broker)


def test_unsupported_version_of_a_known_api(broker):
    """Metadata v99: not in the advertised range; the connection is closed (or an error)."""
    with Connection(broker.bootstrap, timeout=5) as conn:
        conn.send(frame(3, 99, 6, b"\xff\xff\xff\xff\x01"))
        reply = _reply_or_close(conn)
        if reply is not None:
            assert struct.unpack_from(">i", reply) == (6,)
    assert_still_serving(broker)


def test_api_versions_unknown_version_gets_v0_error_body(broker):
    with Connection(broker.bootstrap) as conn:
        # v99 with a v2 header (tagged fields) and a body the server cannot know.
        header = struct.pack(">hhih", 18, 99, 77, 3) + b"bad" + b"\x00"
        body = b"\x0bwire-tests\x040.1\x00"
        conn.send(struct.pack(">i", len(header) + len(body)) + header + body)
        reply = conn.read_frame()
    assert reply is not None, "the server closed the connection instead of answering"
    # An ApiVersions v0 body, all of the frame, answering correlation id 77.
    response = decode_response(18, 0, reply, 77)
    assert response.error_code == ErrorCode.unsupported_version
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[18][0] == 0 and 3 <= ranges[18][1] < 99
    assert 0 in ranges and 1 in ranges and 3 in ranges
    assert_still_serving(broker)


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        pytest.param(0, 7, struct.pack(">hhii", -1, 1, 1000, -1), id="produce-topics"),
        pytest.param(
            2,
            5,
            struct.pack(">ibih", -1, 0, 1, 1) + b"t" + struct.pack(">i", -1),
            id="list-offsets-partitions",
        ),
        pytest.param(15, 0, struct.pack(">i", -1), id="describe-groups"),
    ],
)
def test_null_array_where_the_schema_allows_none_closes_the_connection(
    broker, api_key, version, body
):
    """kio reads it as None; a handler iterating it failed with an internal error."""
    start = broker.stderr_size()
    with Connection(broker.bootstrap, timeout=5) as conn:
        conn.send(frame(api_key, version, 9, body))
        assert conn.closed_by_server()
    assert "is null" in broker.stderr(start)
    assert_still_serving(broker)


def test_produce_with_corrupt_crc(broker, topic_name):
    topic = topic_name()
    batch = bytearray(build_batch([b"one", b"two"], [b"k1", None]))
    batch[-3] ^= 0xFF  # inside the records: covered by the CRC
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
        resp = conn.produce(topic, 0, bytes(batch))
        assert resp.error_code == ErrorCode.corrupt_message, resp
        assert conn.list_offset(topic, 0, -1).offset == 0
        # The connection stays usable, and a good batch goes in at offset 0.
        good = conn.produce(topic, 0, build_batch([b"good"]))
        assert good.error_code == ErrorCode.none and good.base_offset == 0, good
    assert_still_serving(broker)


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda b: b[:-5], id="truncated-batch"),
        pytest.param(lambda b: b[:16] + b"\x01" + b[17:], id="magic-1"),
        pytest.param(lambda b: b[:30], id="header-only"),
        pytest.param(lambda b: b + b"\x00" * 7, id="trailing-bytes"),
    ],
)
def test_produce_with_malformed_batch(broker, topic_name, mangle):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
        resp = conn.produce(topic, 0, mangle(build_batch([b"one", b"two"])))
        assert resp.error_code in (ErrorCode.corrupt_message, ErrorCode.invalid_record), resp
        assert conn.list_offset(topic, 0, -1).offset == 0
    assert_still_serving(broker)


def test_produce_to_unknown_topic(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        resp = conn.produce(topic, 0, build_batch([b"lost"]))
        assert resp.error_code == ErrorCode.unknown_topic_or_partition, resp
        (t,) = conn.metadata([topic], auto_create=False).topics
        assert t.error_code == ErrorCode.unknown_topic_or_partition, "produce created the topic"
    assert_still_serving(broker)


def test_produce_to_unknown_partition(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 2).error_code == ErrorCode.none
        resp = conn.produce(topic, 2, build_batch([b"lost"]))
        assert resp.error_code == ErrorCode.unknown_topic_or_partition, resp
    assert_still_serving(broker)


def test_fetch_past_the_end(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
        assert conn.produce(topic, 0, build_batch([b"a", b"b", b"c"])).error_code == ErrorCode.none
        part = conn.fetch(topic, 0, 1000)
        assert part.error_code == ErrorCode.offset_out_of_range, part
        assert not part.records
        # At the end exactly: no error, no records.
        at_end = conn.fetch(topic, 0, 3)
        assert at_end.error_code == ErrorCode.none, at_end
        assert at_end.high_watermark == 3
        assert not at_end.records
        # And the records are there from offset 1.
        middle = conn.fetch(topic, 0, 1)
        assert middle.error_code == ErrorCode.none
        offsets = [r.offset for r in decode_batch(middle.records)]
        assert offsets[-1] == 2 and 1 in offsets
    assert_still_serving(broker)


def test_fetch_unknown_topic(broker, topic_name):
    with Connection(broker.bootstrap) as conn:
        part = conn.fetch(topic_name(), 0, 0)
        assert part.error_code == ErrorCode.unknown_topic_or_partition, part
    assert_still_serving(broker)


@pytest.mark.parametrize("name", ["bad name!", "", ".", "..", "x" * 250, "tab\there", "ü"])
def test_metadata_invalid_topic_name(broker, name):
    with Connection(broker.bootstrap) as conn:
        resp = conn.metadata([name], auto_create=True)
        (t,) = resp.topics
        assert t.error_code == ErrorCode.invalid_topic_exception, t
        assert t.partitions == ()
    assert_still_serving(broker)


def test_create_topic_twice(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
        assert conn.create_topic(topic, 1).error_code == ErrorCode.topic_already_exists


def test_acks_zero_gets_no_response(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
        conn.send_request(produce_request(topic, {0: build_batch([b"fire"])}, acks=0))
        # The next response on the connection is for the next request.
        assert conn.list_offset(topic, 0, -1).offset == 1


def test_pipelined_requests_answer_in_order(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
        frames = b"".join(encode_request(request(18, 0), 1000 + i) for i in range(20))
        conn.send(frames)
        ids = [struct.unpack_from(">i", conn.read_frame())[0] for _ in range(20)]
        assert ids == list(range(1000, 1020))


def test_trailing_bytes_after_a_request(broker, topic_name):
    """Bytes past a request's last field close the connection, except in Metadata: librdkafka
    writes the null topic array of its flexible "all topics" request as 4 bytes (the frame
    below, as librdkafka 2.x sends it), which Kafka reads as null and answers."""
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, 1).error_code == ErrorCode.none
        header = struct.pack(">hhih", 3, 12, 9, 7) + b"rdkafka" + b"\x00"
        conn.send(struct.pack(">i", len(header) + 7) + header + b"\x00\x00\x00\x00\x01\x00\x00")
        reply = conn.read_frame()
    assert reply is not None, "the server closed the connection instead of answering"
    response = decode_response(3, 12, reply, 9)
    assert topic in {t.name for t in response.topics}
    with Connection(broker.bootstrap, timeout=5) as conn:
        conn.send(frame(18, 0, 8, b"\x00\x00\x00"))  # ApiVersions v0 has no body at all
        assert conn.closed_by_server()
    assert_still_serving(broker)
