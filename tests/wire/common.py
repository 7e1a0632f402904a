"""What the wire tests produce and compare, in one normal form: the records clients send
and receive (``Rec``), numbered records for group tests (``value_of``, ``Record``) produced
over a raw connection, and the server's view of them: stored batches, committed offsets,
the CLI's output."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.records.batch import read_header, split_batches
from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {name: i for i, name in enumerate(CODECS)}
PARTITIONS = 3
BASE_TIMESTAMP = 1_700_000_000_000  # CreateTime the tests give records, ms
TIMEOUT = 30.0  # seconds a client may take for one step
# serve options that make group tests fast: a new group waits 200 ms for more members,
# and members may ask for session timeouts from 1 s.
FAST_GROUP_ARGS = (
    "--group-initial-rebalance-delay-ms",
    "200",
    "--group-min-session-timeout-ms",
    "1000",
)


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


def check_codec(
    bootstrap: str, topic: str, codec: str, partitions: int = PARTITIONS, librdkafka: bool = False
) -> None:
    """Every stored batch of the topic uses the codec the client was told to use, as sent.
    librdkafka sends a batch uncompressed when the codec does not make it smaller (a
    small batch of short records under snappy or lz4): its batches may be either."""
    stored = stored_codecs(bootstrap, topic, partitions)
    wanted = CODEC_IDS[codec]
    if librdkafka and codec != "none":
        assert wanted in stored and stored <= {wanted, 0}, f"stored codecs {stored}, {codec}"
    else:
        assert stored == {wanted}, f"stored codecs {stored}, expected {codec}"


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


# -- numbered records, for group tests -----------------------------------------------------

Record = tuple[int, int, str]  # a record consumed in a group: partition, offset, value


def value_of(i: int) -> str:
    """The value of record i of a topic produced with ``produce_numbered``."""
    return f"r-{i:08d}"


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create a topic over a raw connection."""
    with Connection(bootstrap) as conn:
        result = conn.create_topic(topic, partitions)
        assert result.error_code == ErrorCode.none, result


def produce_numbered(
    bootstrap: str, topic: str, partitions: int, start: int, count: int, batch: int = 500
) -> dict[int, int]:
    """Records ``value_of(i)`` for i in [start, start + count), record i to partition
    i % partitions, in batches of up to ``batch`` records. Returns partition -> log end."""
    per_partition: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for i in range(start, start + count):
        per_partition[i % partitions].append(value_of(i).encode())
    ends = {}
    with Connection(bootstrap) as conn:
        for p, values in per_partition.items():
            for k in range(0, len(values), batch):
                resp = conn.produce(topic, p, build_batch(values[k : k + batch]))
                assert resp.error_code == ErrorCode.none, resp
            ends[p] = conn.list_offset(topic, p, -1).offset
    return ends


def positions_after(records: Iterable[Record]) -> dict[int, int]:
    """partition -> offset after the last of ``records`` on it."""
    out: dict[int, int] = {}
    for p, offset, _ in records:
        out[p] = max(out.get(p, 0), offset + 1)
    return out


class Collector:
    """Records consumed a poll at a time, until ``count`` came or ``timeout`` passed."""

    def __init__(self, count: int, timeout: float = TIMEOUT) -> None:
        self.count = count
        self.records: list[Record] = []
        self.deadline = time.monotonic() + timeout

    def wanted(self) -> int:
        """How many records the next poll may return (500 at most); 0 when done."""
        left = self.count - len(self.records)
        if left <= 0 or time.monotonic() >= self.deadline:
            return 0
        return min(500, left)

    def result(self, context: str = "") -> list[Record]:
        """The records; fails unless exactly ``count`` came."""
        got = len(self.records)
        assert got == self.count, f"got {got} of {self.count} records{context}"
        return self.records


def wait_until(
    condition: Callable[[], Any],
    what: str,
    timeout: float = TIMEOUT,
    context: Callable[[], str] = lambda: "",
    interval: float = 0.05,
) -> Any:
    """Poll ``condition`` until it returns something true; fail with ``context()``."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{context()}")
        time.sleep(interval)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets of the topic's partitions (-1: none)."""
    with Connection(bootstrap) as conn:
        fetched = conn.offset_fetch(group, {topic: list(range(partitions))})
    return {p: offset for (_, p), (offset, _, _) in fetched.items()}


def wait_committed(
    bootstrap: str, group: str, topic: str, partitions: int, ends: dict[int, int]
) -> None:
    """Wait until the group's committed offsets of the topic's partitions are ``ends``."""
    wait_until(
        lambda: committed(bootstrap, group, topic, partitions) == ends,
        f"committed offsets {ends}",
        context=lambda: str(committed(bootstrap, group, topic, partitions)),
    )


def cli_group(broker: Any, group: str) -> dict:
    """``kafkaesque group GROUP --format json`` as the tests read it: type, state,
    generation (a consumer group's epoch) and members as strings, the member ids as
    ``member_lines``, and per partition (topic, partition) -> (committed, end, lag) as
    strings ("-": none)."""
    text = broker.cli("group", group, "--format", "json").stdout.decode()
    doc = json.loads(text)

    def shown(value: Any) -> str:
        return "-" if value is None else str(value)

    return {
        "text": text,
        "type": doc["type"],
        "state": doc["state"],
        "generation": shown(doc.get("generation", doc.get("epoch"))),
        "members": str(len(doc["members"])),
        "member_lines": [m["member_id"] for m in doc["members"]],
        "rows": {
            (r["topic"], r["partition"]): (
                shown(r["current_offset"]),
                shown(r["log_end"]),
                shown(r["lag"]),
            )
            for r in doc["offsets"]
        },
    }
