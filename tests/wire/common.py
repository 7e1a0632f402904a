"""Records the client tests produce and compare, in one normal form."""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kafkaesque.records import read_header, split_batches
from tests.kafka_client import Connection

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {name: i for i, name in enumerate(CODECS)}
PARTITIONS = 3
BASE_TIMESTAMP = 1_700_000_000_000  # CreateTime the tests give records, ms


@dataclass(frozen=True)
class Rec:
    """One record as every client and the CLI should see it."""

    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def sample(
    partitions: int = PARTITIONS,
    per_partition: int = 6,
    null_header_values: bool = True,
    null_values: bool = True,
    binary: bool = True,
) -> list[Rec]:
    """Records with explicit partitions and timestamps, in send order, with the offsets they
    should get in a new topic. Covers null vs empty keys and values, binary bytes, no
    headers, several headers, repeated header names, empty header values and (optionally)
    null header values. Values are long and repetitive, so every codec shrinks them."""
    filler = b" the quick brown fox jumps over the lazy dog" * 8
    keys: list[bytes | None] = [None, b"", b"key-a", b"k\xff\x00" if binary else b"k-bin"]
    headers: list[tuple[tuple[str, bytes | None], ...]] = [
        (),
        (("h1", b"v1"),),
        (("dup", b"a"), ("dup", b"b"), ("empty", b"")),
        (("n", None),) if null_header_values else (("n", b"not-null"),),
    ]
    out: list[Rec] = []
    i = 0
    for offset in range(per_partition):
        for p in range(partitions):
            value: bytes | None = b"value-%d-%d" % (p, offset) + filler
            if offset == 1:
                value = b""
            elif offset == 2 and null_values:
                value = None
            elif offset == 3 and binary:
                value = b"\x00\xff\xfe" + filler
            key = keys[(offset + p) % len(keys)]
            if value is None and key is None:
                key = b"tombstone"  # a null value needs a key in several clients
            out.append(
                Rec(
                    partition=p,
                    offset=offset,
                    timestamp=BASE_TIMESTAMP + 1000 * i,
                    key=key,
                    value=value,
                    headers=headers[(offset + 2 * p) % len(headers)],
                )
            )
            i += 1
    return out


def by_position(records: list[Rec]) -> list[Rec]:
    return sorted(records, key=lambda r: (r.partition, r.offset))


def cli_records(broker, topic: str) -> list[Rec]:  # broker: tests.wire.conftest.Broker
    """The topic's records as ``kafkaesque consume --format json`` prints them."""
    out = broker.cli("consume", topic, "--format", "json").stdout
    return by_position([from_json(json.loads(line)) for line in out.splitlines()])


def _field(obj: dict, name: str) -> bytes | None:
    if f"{name}_base64" in obj:
        return base64.b64decode(obj[f"{name}_base64"])
    value = obj.get(name)
    return None if value is None else value.encode()


def from_json(obj: dict) -> Rec:
    headers = tuple((h["key"], _field(h, "value")) for h in obj.get("headers", []))
    return Rec(
        partition=obj["partition"],
        offset=obj["offset"],
        timestamp=obj["timestamp"],
        key=_field(obj, "key"),
        value=_field(obj, "value"),
        headers=headers,
    )


def cli_lines_input(partitions: int = PARTITIONS, per_partition: int = 5) -> bytes:
    """Lines for ``kafkaesque produce --key-separator :``: null keys, empty keys, keys,
    empty values."""
    lines = []
    for i in range(partitions * per_partition):
        if i % 4 == 0:
            lines.append(b"no-key-line-%d" % i)  # no separator: null key
        elif i % 4 == 1:
            lines.append(b":empty-key-%d" % i)
        elif i % 4 == 2:
            lines.append(b"key-%d:" % i)  # empty value
        else:
            lines.append(b"key-%d:value-%d:with:colons" % (i, i))
    return b"\n".join(lines) + b"\n"


def check_codec(bootstrap: str, topic: str, codec: str, partitions: int = PARTITIONS) -> None:
    """Every stored batch of the topic uses the codec the client was told to use."""
    stored = stored_codecs(bootstrap, topic, partitions)
    assert stored == {CODEC_IDS[codec]}, f"stored codecs {stored}, expected {codec}"


def stored_batches(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    """Every batch of a partition, as the server returns them from Fetch."""
    out: list[bytes] = []
    offset = 0
    with Connection(bootstrap) as conn:
        end = conn.list_offset(topic, partition, -1).offset
        while offset < end:
            part = conn.fetch(topic, partition, offset)
            assert part.error_code == ErrorCode.none, part
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


def recent(timestamp: int, slack_ms: int = 120_000) -> bool:
    return abs(timestamp - int(time.time() * 1000)) < slack_ms
