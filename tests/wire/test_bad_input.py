"""Bad bytes on raw sockets: the server answers with an error or closes that connection, and
keeps serving new ones."""

from __future__ import annotations

import random
import socket
import struct

import pytest

from kafkaesque.records import build_batch, decode_batch
from tests.wire import raw


def assert_still_serving(broker) -> None:
    """A new connection gets an ApiVersions answer."""
    with raw.Connection(broker.bootstrap) as conn:
        resp = raw.api_versions(conn, 0)
    assert resp.error_code == raw.NONE
    assert {k.api_key for k in resp.api_keys} >= {0, 1, 3, 18}


def frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    """A request frame with header v1 (client id "bad") and the given body bytes."""
    header = struct.pack(">hhih", api_key, version, correlation_id, 3) + b"bad"
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_api_versions_round_trip(broker):
    with raw.Connection(broker.bootstrap) as conn:
        for version in range(5):
            resp = raw.api_versions(conn, version)
            assert resp.error_code == raw.NONE, (version, resp)
            ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            assert ranges[18][0] == 0 and ranges[18][1] >= 3
            assert ranges[0][1] >= 7  # Produce
            assert ranges[1][0] <= 4 <= ranges[1][1]  # Fetch


def test_truncated_frame_then_close(broker):
    with socket.create_connection(raw.parse_address(broker.bootstrap), timeout=5) as s:
        s.sendall(struct.pack(">i", 100) + frame(18, 0, 1)[4:14])
    assert_still_serving(broker)


def test_truncated_frame_then_half_close(broker):
    with raw.Connection(broker.bootstrap) as conn:
        conn.send(struct.pack(">i", 100) + b"\x00\x12\x00\x00")
        conn.sock.shutdown(socket.SHUT_WR)
        assert conn.closed_by_server()
    assert_still_serving(broker)


@pytest.mark.parametrize("size", [200 * 1024 * 1024, 2**31 - 1, -1, -(2**31), 0])
def test_frame_size_out_of_range_closes_the_connection(broker, size):
    with raw.Connection(broker.bootstrap, timeout=5) as conn:
        conn.send(struct.pack(">i", size) + b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")
        assert conn.closed_by_server(), f"size prefix {size}: the connection stays open"
    assert_still_serving(broker)


def test_random_garbage(broker):
    rng = random.Random(20240611)
    for _ in range(5):
        garbage = rng.randbytes(1024)
        with raw.Connection(broker.bootstrap, timeout=5) as conn:
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
        with raw.Connection(broker.bootstrap, timeout=5) as conn:
            conn.send(frame(api_key, version, 42, body))
            reply = _reply_or_close(conn)
            if reply is not None:
                (correlation_id,) = struct.unpack_from(">i", reply)
                assert correlation_id == 42
    assert_still_serving(broker)


def _reply_or_close(conn: raw.Connection) -> bytes | None:
    try:
        return conn.read_frame()
    except ConnectionResetError:
        return None


@pytest.mark.parametrize("api_key", [999, 77, -1])
def test_unknown_api_key(broker, api_key):
    """Kafka closes the connection; an error response is acceptable too."""
    with raw.Connection(broker.bootstrap, timeout=5) as conn:
        conn.send(frame(api_key, 0, 5))
        reply = _reply_or_close(conn)
        if reply is not None:
            (correlation_id,) = struct.unpack_from(">i", reply)
            assert correlation_id == 5
    assert_still_serving(broker)


def test_unsupported_version_of_a_known_api(broker):
    """Metadata v99: not in the advertised range; the connection is closed (or an error)."""
    with raw.Connection(broker.bootstrap, timeout=5) as conn:
        conn.send(frame(3, 99, 6, b"\xff\xff\xff\xff\x01"))
        reply = _reply_or_close(conn)
        if reply is not None:
            assert struct.unpack_from(">i", reply) == (6,)
    assert_still_serving(broker)


def test_api_versions_unknown_version_gets_v0_error_body(broker):
    with raw.Connection(broker.bootstrap) as conn:
        # v99 with a v2 header (tagged fields) and a body the server cannot know.
        header = struct.pack(">hhih", 18, 99, 77, 3) + b"bad" + b"\x00"
        body = b"\x0bwire-tests\x040.1\x00"
        conn.send(struct.pack(">i", len(header) + len(body)) + header + body)
        reply = conn.read_frame()
    assert reply is not None, "the server closed the connection instead of answering"
    correlation_id, error, count = struct.unpack_from(">ihi", reply)
    assert correlation_id == 77
    assert error == raw.UNSUPPORTED_VERSION
    assert len(reply) == 10 + 6 * count, "the body is not ApiVersions v0"
    ranges = {}
    for i in range(count):
        key, lo, hi = struct.unpack_from(">hhh", reply, 10 + 6 * i)
        ranges[key] = (lo, hi)
    assert ranges[18][0] == 0 and 3 <= ranges[18][1] < 99
    assert 0 in ranges and 1 in ranges and 3 in ranges
    assert_still_serving(broker)


def test_produce_with_corrupt_crc(broker, topic_name):
    topic = topic_name()
    batch = bytearray(build_batch([b"one", b"two"], [b"k1", None]))
    batch[-3] ^= 0xFF  # inside the records: covered by the CRC
    with raw.Connection(broker.bootstrap) as conn:
        assert raw.create_topic(conn, topic, 1).error_code == raw.NONE
        resp = raw.produce(conn, topic, 0, bytes(batch))
        assert resp.error_code == raw.CORRUPT_MESSAGE, resp
        assert raw.list_offset(conn, topic, 0, -1).offset == 0
        # The connection stays usable, and a good batch goes in at offset 0.
        good = raw.produce(conn, topic, 0, build_batch([b"good"]))
        assert good.error_code == raw.NONE and good.base_offset == 0, good
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
    with raw.Connection(broker.bootstrap) as conn:
        assert raw.create_topic(conn, topic, 1).error_code == raw.NONE
        resp = raw.produce(conn, topic, 0, mangle(build_batch([b"one", b"two"])))
        assert resp.error_code in (raw.CORRUPT_MESSAGE, 87), resp  # 87: INVALID_RECORD
        assert raw.list_offset(conn, topic, 0, -1).offset == 0
    assert_still_serving(broker)


def test_produce_to_unknown_topic(broker, topic_name):
    topic = topic_name()
    with raw.Connection(broker.bootstrap) as conn:
        resp = raw.produce(conn, topic, 0, build_batch([b"lost"]))
        assert resp.error_code == raw.UNKNOWN_TOPIC_OR_PARTITION, resp
        (t,) = raw.metadata(conn, [topic], auto_create=False).topics
        assert t.error_code == raw.UNKNOWN_TOPIC_OR_PARTITION, "produce created the topic"
    assert_still_serving(broker)


def test_produce_to_unknown_partition(broker, topic_name):
    topic = topic_name()
    with raw.Connection(broker.bootstrap) as conn:
        assert raw.create_topic(conn, topic, 2).error_code == raw.NONE
        resp = raw.produce(conn, topic, 2, build_batch([b"lost"]))
        assert resp.error_code == raw.UNKNOWN_TOPIC_OR_PARTITION, resp
    assert_still_serving(broker)


def test_fetch_past_the_end(broker, topic_name):
    topic = topic_name()
    with raw.Connection(broker.bootstrap) as conn:
        assert raw.create_topic(conn, topic, 1).error_code == raw.NONE
        assert raw.produce(conn, topic, 0, build_batch([b"a", b"b", b"c"])).error_code == 0
        part = raw.fetch(conn, topic, 0, 1000)
        assert part.error_code == raw.OFFSET_OUT_OF_RANGE, part
        assert not part.records
        # At the end exactly: no error, no records.
        at_end = raw.fetch(conn, topic, 0, 3)
        assert at_end.error_code == raw.NONE, at_end
        assert at_end.high_watermark == 3
        assert not at_end.records
        # And the records are there from offset 1.
        middle = raw.fetch(conn, topic, 0, 1)
        assert middle.error_code == raw.NONE
        offsets = [r.offset for r in decode_batch(middle.records)]
        assert offsets[-1] == 2 and 1 in offsets
    assert_still_serving(broker)


def test_fetch_unknown_topic(broker, topic_name):
    with raw.Connection(broker.bootstrap) as conn:
        part = raw.fetch(conn, topic_name(), 0, 0)
        assert part.error_code == raw.UNKNOWN_TOPIC_OR_PARTITION, part
    assert_still_serving(broker)


@pytest.mark.parametrize("name", ["bad name!", "", ".", "..", "x" * 250, "tab\there", "ü"])
def test_metadata_invalid_topic_name(broker, name):
    with raw.Connection(broker.bootstrap) as conn:
        resp = raw.metadata(conn, [name], auto_create=True)
        (t,) = resp.topics
        assert t.error_code == raw.INVALID_TOPIC_EXCEPTION, t
        assert t.partitions == ()
    assert_still_serving(broker)


def test_create_topic_twice(broker, topic_name):
    topic = topic_name()
    with raw.Connection(broker.bootstrap) as conn:
        assert raw.create_topic(conn, topic, 1).error_code == raw.NONE
        assert raw.create_topic(conn, topic, 1).error_code == raw.TOPIC_ALREADY_EXISTS


def test_acks_zero_gets_no_response(broker, topic_name):
    topic = topic_name()
    with raw.Connection(broker.bootstrap) as conn:
        assert raw.create_topic(conn, topic, 1).error_code == raw.NONE
        assert raw.produce(conn, topic, 0, build_batch([b"fire"]), acks=0) is None
        # The next response on the connection is for the next request.
        assert raw.list_offset(conn, topic, 0, -1).offset == 1


def test_pipelined_requests_answer_in_order(broker, topic_name):
    topic = topic_name()
    with raw.Connection(broker.bootstrap) as conn:
        assert raw.create_topic(conn, topic, 1).error_code == raw.NONE
        req_mod, _ = raw.classes(18, 0)
        frames = b"".join(
            raw.encode_request(req_mod.ApiVersionsRequest(), 1000 + i) for i in range(20)
        )
        conn.send(frames)
        ids = [struct.unpack_from(">i", conn.read_frame())[0] for _ in range(20)]
        assert ids == list(range(1000, 1020))


def test_trailing_bytes_after_a_request(broker, topic_name):
    """Bytes past a request's last field close the connection, except in Metadata: librdkafka
    writes the null topic array of its flexible "all topics" request as 4 bytes (the frame
    below, as librdkafka 2.x sends it), which Kafka reads as null and answers."""
    topic = topic_name()
    with raw.Connection(broker.bootstrap) as conn:
        assert raw.create_topic(conn, topic, 1).error_code == raw.NONE
        header = struct.pack(">hhih", 3, 12, 9, 7) + b"rdkafka" + b"\x00"
        conn.send(struct.pack(">i", len(header) + 7) + header + b"\x00\x00\x00\x00\x01\x00\x00")
        reply = conn.read_frame()
    assert reply is not None, "the server closed the connection instead of answering"
    _, module = raw.classes(3, 12)
    response, _ = raw.entity_reader(module.MetadataResponse)(reply, 5)  # id, no tags
    assert topic in {t.name for t in response.topics}
    with raw.Connection(broker.bootstrap, timeout=5) as conn:
        conn.send(frame(18, 0, 8, b"\x00\x00\x00"))  # ApiVersions v0 has no body at all
        assert conn.closed_by_server()
    assert_still_serving(broker)
