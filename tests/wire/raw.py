"""A minimal blocking Kafka client on a raw socket, built on kio: for tests that need exact
control of the bytes on the wire (retried batches, bad input) and for reading stored batches
back as they are."""

from __future__ import annotations

import datetime
import io
import itertools
import socket
import struct
import sys
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from kafkaesque.records import read_header, split_batches

TIMEOUT = 10.0  # seconds for any socket operation

# Error codes the tests check, as Kafka numbers them.
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
UNKNOWN_PRODUCER_ID = 59

_correlation = itertools.count(1)


def classes(api_key: int, version: int) -> tuple[Any, Any]:
    """The kio modules of a request and its response, to get at their nested classes."""
    req = load_request_schema(api_key, version)
    resp = load_response_schema(api_key, version)
    return sys.modules[req.__module__], sys.modules[resp.__module__]


def encode_request(req: Any, correlation_id: int, client_id: str | None = "wire-tests") -> bytes:
    """A size-prefixed request frame."""
    header_cls = type(req).__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    header = header_cls(
        request_api_key=req.__api_key__,
        request_api_version=req.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    entity_writer(header_cls)(buf, header)
    entity_writer(type(req))(buf, req)
    out = buf.getbuffer()
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


def parse_address(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


class Connection:
    def __init__(self, bootstrap: str, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection(parse_address(bootstrap), timeout=timeout)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_exactly(self, n: int) -> bytes | None:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(n - got)
            if not chunk:
                return None
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def read_frame(self) -> bytes | None:
        """One response frame without its size prefix; None when the server closed."""
        prefix = self._read_exactly(4)
        if prefix is None:
            return None
        (size,) = struct.unpack(">i", prefix)
        return self._read_exactly(size)

    def closed_by_server(self) -> bool:
        """True when the server closes the connection (EOF or reset) before sending anything."""
        try:
            data = self.sock.recv(1)
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        return data == b""

    def request(self, req: Any, client_id: str | None = "wire-tests") -> Any:
        correlation_id = next(_correlation)
        self.send(encode_request(req, correlation_id, client_id))
        if getattr(req, "acks", None) == 0:
            return None
        frame = self.read_frame()
        if frame is None:
            raise ConnectionError(f"server closed the connection instead of answering {req!r}")
        resp_cls = load_response_schema(req.__api_key__, req.__version__)
        header, used = entity_reader(resp_cls.__header_schema__)(frame, 0)
        assert header.correlation_id == correlation_id, (header, correlation_id)
        body, size = entity_reader(resp_cls)(frame, used)
        assert used + size == len(frame), f"{len(frame) - used - size} trailing bytes"
        return body


# Requests -------------------------------------------------------------------------------


def api_versions(conn: Connection, version: int = 0) -> Any:
    req_mod, _ = classes(18, version)
    if version >= 3:
        req = req_mod.ApiVersionsRequest(
            client_software_name="wire-tests", client_software_version="0.1"
        )
    else:
        req = req_mod.ApiVersionsRequest()
    return conn.request(req)


def init_producer_id(conn: Connection) -> tuple[int, int]:
    req_mod, _ = classes(22, 0)
    resp = conn.request(
        req_mod.InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60)
        )
    )
    assert resp.error_code == NONE, resp
    return resp.producer_id, resp.producer_epoch


def produce(
    conn: Connection,
    topic: str,
    partition: int,
    records: bytes,
    acks: int = -1,
    version: int = 7,
) -> Any:
    """The PartitionProduceResponse of a one-partition produce."""
    req_mod, _ = classes(0, version)
    req = req_mod.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            req_mod.TopicProduceData(
                name=topic,
                partition_data=(req_mod.PartitionProduceData(index=partition, records=records),),
            ),
        ),
    )
    resp = conn.request(req)
    if resp is None:
        return None
    (topic_resp,) = resp.responses
    (part_resp,) = topic_resp.partition_responses
    return part_resp


def fetch_request(
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int = 1 << 20,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
) -> Any:
    """A one-partition FetchRequest v11."""
    req_mod, _ = classes(1, 11)
    return req_mod.FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            req_mod.FetchTopic(
                topic=topic,
                partitions=(
                    req_mod.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=max_bytes,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def fetch(
    conn: Connection,
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int = 1 << 20,
    max_wait_ms: int = 0,
) -> Any:
    """The PartitionData of a one-partition Fetch v11."""
    resp = conn.request(fetch_request(topic, partition, offset, max_bytes, max_wait_ms))
    (topic_resp,) = resp.responses
    (part,) = topic_resp.partitions
    return part


def list_offset(conn: Connection, topic: str, partition: int, timestamp: int = -1) -> Any:
    """The ListOffsetsPartitionResponse (v2) for latest (-1), earliest (-2) or a time."""
    req_mod, _ = classes(2, 2)
    req = req_mod.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(
            req_mod.ListOffsetsTopic(
                name=topic,
                partitions=(
                    req_mod.ListOffsetsPartition(partition_index=partition, timestamp=timestamp),
                ),
            ),
        ),
    )
    resp = conn.request(req)
    (topic_resp,) = resp.topics
    (part,) = topic_resp.partitions
    return part


def metadata(conn: Connection, topics: list[str] | None, auto_create: bool = False) -> Any:
    req_mod, _ = classes(3, 4)
    req = req_mod.MetadataRequest(
        topics=None
        if topics is None
        else tuple(req_mod.MetadataRequestTopic(name=t) for t in topics),
        allow_auto_topic_creation=auto_create,
    )
    return conn.request(req)


def create_topic(conn: Connection, topic: str, partitions: int = 1) -> Any:
    """The CreatableTopicResult (v3)."""
    req_mod, _ = classes(19, 3)
    req = req_mod.CreateTopicsRequest(
        topics=(
            req_mod.CreatableTopic(
                name=topic,
                num_partitions=partitions,
                replication_factor=1,
                assignments=(),
                configs=(),
            ),
        ),
        timeout=datetime.timedelta(seconds=10),
        validate_only=False,
    )
    (result,) = conn.request(req).topics
    return result


# Reading a partition back as stored ------------------------------------------------------


def stored_batches(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    """Every batch of a partition, as the server returns them from Fetch."""
    out: list[bytes] = []
    offset = 0
    with Connection(bootstrap) as conn:
        end = list_offset(conn, topic, partition, -1).offset
        while offset < end:
            part = fetch(conn, topic, partition, offset)
            assert part.error_code == NONE, part
            batches = split_batches(part.records or b"")
            assert batches, f"no batch at offset {offset} of {topic}[{partition}] (end {end})"
            for batch in batches:
                header = read_header(batch)
                if header.base_offset + header.last_offset_delta >= offset:
                    out.append(batch)
                    offset = header.base_offset + header.last_offset_delta + 1
    return out


def stored_codecs(bootstrap: str, topic: str, partitions: int) -> set[int]:
    """The compression codecs (0 none .. 4 zstd) of every stored batch of the topic."""
    return {
        read_header(batch).attributes & 0x07
        for p in range(partitions)
        for batch in stored_batches(bootstrap, topic, p)
    }
