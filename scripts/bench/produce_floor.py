"""The broker's CPU per produced record against a floor and against Redis', in one run.

The floor (this file with --serve, a subprocess as the broker is) is the least a Python
front end on asyncio spends to take the same produce requests from the same client and
store their batches in the same Redis: one asyncio protocol per connection that cuts
frames out of the received chunks (a view when a request is within one chunk, else one
copy, as the broker's ClientStream), parses a Produce with the broker's own parser
(wire/protocol/produce_request.py), sends every partition's records to Redis as they
came in one EVALSHA (an RPUSH per partition in Lua) on one shared unix-socket connection
read by hiredis, and answers from the reply with the broker's own encoder
(wire/protocol/fast_responses.py), in order, in callbacks rather than tasks. No checks
(CRCs, record layout, sequence numbers), no topic configs, ACLs, quotas, budget,
deadlines, offsets or metrics: what is left is the interpreter and the kernel around
each request, the copies of the bytes, and asyncio. ApiVersions and Metadata (a few per
run) are answered with kio, every topic with --partitions partitions led by node 0.

The checked floor (--serve with --checked) is the floor plus the one piece of the broker's
per-record work that no design may drop: every batch cut out and checked by the broker's
own `split_batches` (header, CRC, attributes, each record's layout and offset delta), as
`Partitions.append_many` does before anything is written. What the broker spends beyond
it is offsets, idempotence, transactions, topics, ACLs, quotas, metrics and the layers'
glue; if the checked floor alone is near the goal, the goal leaves no room for them.

The bench starts a fresh redis-server (appendfsync always, as the embedded server and
durability.py; no AOF rewrites during the run), a `kafkaesque serve` broker and the
floor on it, then, R rounds each, the two taking turns:

- the same client: N records of 100 bytes over P partitions produced with durability.py's
  producer (confluent-kafka, acks=1, linger 5 ms, 1 MB batches) through each. librdkafka
  sizes its requests by how soon they are answered, so the two get different requests
  (printed: the Produce requests it sent);
- the same requests: the requests of one such run through the floor, written down by it,
  sent as they are to each by a small client of its own (5 in flight).

Per round and as medians: CPU seconds per million records of the front end (broker or
floor), Redis and the client, from /proc. The goal of the broker's CPU is half of Redis'
own in the broker's rounds (the issue's "<= 0.5 x Redis'"); the floor's share of that
says what any asyncio front end would need at least.

    PYTHONPATH=. python scripts/bench/produce_floor.py [--records N] [--partitions P]
                                                       [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import uuid
from collections import deque
from pathlib import Path
from typing import Any, BinaryIO

REPO = Path(__file__).resolve().parents[2]
# The repository's packages, ahead of this directory (its wire.py is not the package).
sys.path.insert(0, str(REPO))

import hiredis  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402

from kafkaesque.records.batch import split_batches  # noqa: E402
from wire.handlers import supported  # noqa: E402
from wire.net.server import keep_freed_memory  # noqa: E402
from wire.protocol.codec import build, parse_request, response_pieces  # noqa: E402
from wire.protocol.fast_responses import ProduceAnswer  # noqa: E402

PRODUCE, METADATA, API_VERSIONS = 0, 3, 18
# ApiVersions answers the broker's whole table (wire/handlers/__init__.py), so the client
# sends what it sends the broker (librdkafka writes RecordBatch v2 only to a broker that
# offers Fetch v4+ besides Produce v3+); only these three are answered.
ADVERTISED = supported()
SUPPORTED = {key: ADVERTISED[key] for key in (PRODUCE, METADATA, API_VERSIONS)}
NODE = 0
CAPTURED = "captured"  # the topic whose requests the floor writes down, to replay
REPLAY_IN_FLIGHT = 5  # requests the replaying client keeps in flight
STORE = b"""
local out = {}
for i = 1, #KEYS do out[i] = redis.call('RPUSH', KEYS[i], ARGV[i]) end
return out
"""
RECORD_COUNT = struct.Struct(">i")  # a batch's record count, at byte 57
NO_THROTTLE = datetime.timedelta(0)


def _bulk(data: bytes | memoryview) -> list[bytes | memoryview]:
    return [b"$%d\r\n" % len(data), data, b"\r\n"]


class RedisLink(asyncio.Protocol):
    """One connection to Redis for every client connection: commands written in order,
    their replies (parsed by hiredis) handed to callbacks in the same order."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reader = hiredis.Reader()
        self.waiting: deque[Any] = deque()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        # As the broker's shared connection (kafkaesque.hot.pipelined): a request's
        # command goes out in one send, not in pieces of the default 208 KiB.
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)

    def send(self, command: bytes, done: Any) -> None:
        assert self.transport is not None
        self.waiting.append(done)
        self.transport.write(command)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        reply = self.reader.gets()
        while reply is not False:
            self.waiting.popleft()(reply)
            reply = self.reader.gets()


class FloorConnection(asyncio.Protocol):
    """One client: frames cut from the received chunks, answered in order."""

    def __init__(self, floor: Floor) -> None:
        self.floor = floor
        self.transport: asyncio.Transport | None = None
        self.head = b""  # part of a size prefix
        self.frame: bytearray | None = None  # a request received in pieces
        self.got = 0
        self.answers: deque[list[Any]] = deque()  # [pieces or None while pending]
        self.out: list[bytes] = []  # answers of this loop turn, sent together at its end

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        view = memoryview(data)
        pos, end = 0, len(data)
        while pos < end:
            if self.frame is not None:  # the rest of a request received in pieces
                take = min(len(self.frame) - self.got, end - pos)
                self.frame[self.got : self.got + take] = view[pos : pos + take]
                self.got += take
                pos += take
                if self.got == len(self.frame):
                    frame, self.frame = self.frame, None
                    self.request(memoryview(frame).toreadonly())
                continue
            if self.head or end - pos < 4:
                need = 4 - len(self.head)
                self.head += bytes(view[pos : pos + need])
                pos += min(need, end - pos)
                if len(self.head) < 4:
                    return
                size = int.from_bytes(self.head, "big")
                self.head = b""
            else:
                size = int.from_bytes(view[pos : pos + 4], "big")
                pos += 4
            if end - pos >= size:  # within this chunk: a view, no copy
                self.request(view[pos : pos + size])
                pos += size
            else:
                self.frame, self.got = bytearray(size), 0

    def request(self, frame: memoryview) -> None:
        request = parse_request(frame, SUPPORTED)
        slot: list[Any] = [None]
        if request.api_key == PRODUCE:
            if request.body.acks != 0:
                self.answers.append(slot)
            self.floor.store(request, frame, lambda pieces: self.answered(slot, pieces))
            return
        self.answers.append(slot)
        if request.api_key == METADATA:
            response = self.floor.metadata(request)
        else:
            response = self.floor.api_versions(request)
        self.answered(slot, response_pieces(request.correlation_id, response))

    def answered(self, slot: list[Any], pieces: list[bytes] | None) -> None:
        slot[0] = pieces
        ready = bool(self.out)
        while self.answers and self.answers[0][0] is not None:
            self.out += self.answers.popleft()[0]
        if self.out and not ready:
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        out, self.out = self.out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))


class Floor:
    def __init__(
        self,
        redis: RedisLink,
        sha: bytes,
        host: str,
        port: int,
        partitions: int,
        capture: BinaryIO | None = None,
        checked: bool = False,
    ):
        self.redis = redis
        self.checked = checked  # each batch checked as the broker checks a client's
        self.sha = sha
        self.host, self.port = host, port
        self.partitions = partitions
        self.offsets: dict[tuple[str, int], int] = {}
        self.capture = capture  # where the requests to CAPTURED are written, size-prefixed

    def store(self, request: Any, frame: memoryview, answer: Any) -> None:
        """Every partition's records in one EVALSHA; the answer once Redis replied."""
        body = request.body
        if self.capture is not None and body.topic_data[0][0] == CAPTURED:
            self.capture.write(len(frame).to_bytes(4, "big"))
            self.capture.write(frame)
            self.capture.flush()
        keys: list[bytes] = []
        values: list[memoryview] = []
        for topic, partitions in body.topic_data:
            for index, records in partitions:
                if self.checked:  # the copies it makes are what the broker stores
                    values.append(b"".join(split_batches(records)))
                else:
                    values.append(records)
                keys.append(f"floor:{topic}:{index}".encode())
        parts: list[bytes | memoryview] = [
            b"*%d\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n" % (3 + 2 * len(keys), self.sha),
            *_bulk(b"%d" % len(keys)),
        ]
        for key in keys:
            parts += _bulk(key)
        for value in values:
            parts += _bulk(value)

        def stored(reply: Any) -> None:
            if isinstance(reply, Exception):
                raise reply
            topics = []
            for topic, partitions in body.topic_data:
                answers = []
                for index, records in partitions:
                    base = self.offsets.get((topic, index), 0)
                    self.offsets[topic, index] = base + RECORD_COUNT.unpack_from(records, 57)[0]
                    answers.append((index, 0, base, -1, 0, (), None))
                topics.append((topic, tuple(answers)))
            if body.acks != 0:
                done = ProduceAnswer(request.api_version, NO_THROTTLE, tuple(topics))
                answer(response_pieces(request.correlation_id, done))

        self.redis.send(b"".join(parts), stored)

    def metadata(self, request: Any) -> Any:
        topic_class, partition_class, broker_class = request.response_entities(
            "MetadataResponseTopic", "MetadataResponsePartition", "MetadataResponseBroker"
        )
        names = [t.name for t in request.body.topics or ()]
        topics = tuple(
            build(
                topic_class,
                error_code=ErrorCode.none,
                name=name,
                topic_id=uuid.UUID(int=i + 1),
                is_internal=False,
                partitions=tuple(
                    build(
                        partition_class,
                        error_code=ErrorCode.none,
                        partition_index=p,
                        leader_id=NODE,
                        leader_epoch=0,
                        replica_nodes=(NODE,),
                        isr_nodes=(NODE,),
                        offline_replicas=(),
                    )
                    for p in range(self.partitions)
                ),
                topic_authorized_operations=-2147483648,
            )
            for i, name in enumerate(names)
        )
        broker = build(broker_class, node_id=NODE, host=self.host, port=self.port, rack=None)
        return build(
            request.response_class,
            throttle_time=NO_THROTTLE,
            brokers=(broker,),
            cluster_id="floor",
            controller_id=NODE,
            topics=topics,
            cluster_authorized_operations=-2147483648,
        )

    def api_versions(self, request: Any) -> Any:
        entry = request.response_entity("ApiVersion")
        keys = tuple(
            build(entry, api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(ADVERTISED.items())
        )
        return build(
            request.response_class,
            error_code=ErrorCode.none,
            api_keys=keys,
            throttle_time=NO_THROTTLE,
        )


async def serve(
    port: int, redis_path: str, partitions: int, capture: str | None, checked: bool
) -> None:
    """The floor server, until killed."""
    import redis as redis_py

    sha = redis_py.Redis(unix_socket_path=redis_path).script_load(STORE).encode()
    loop = asyncio.get_running_loop()
    _, link = await loop.create_unix_connection(RedisLink, redis_path)
    out = None if capture is None else open(capture, "wb")  # open till killed
    floor = Floor(link, sha, "127.0.0.1", port, partitions, out, checked)
    server = await loop.create_server(lambda: FloorConnection(floor), "127.0.0.1", port)
    gc.freeze()  # as the broker, once listening
    async with server:
        await server.serve_forever()


# -- the bench --------------------------------------------------------------------------


def start_floor(
    redis_url: str, port: int, partitions: int, capture: str, checked: bool = False
) -> subprocess.Popen:
    command = [sys.executable, __file__, "--serve", str(port), "--redis-url", redis_url]
    command += ["--partitions", str(partitions), "--capture", capture]
    from broker_process import wait_listening

    proc = subprocess.Popen([*command, "--checked"] if checked else command)
    return wait_listening(proc, port, "floor server")


def replay(port: int, path: str, topic: str) -> None:
    """Send the requests written down in ``path`` to ``port``, REPLAY_IN_FLIGHT at a time,
    and read every answer (a client costing next to nothing, in a process of its own);
    to ``topic`` (as long a name as CAPTURED) instead of CAPTURED."""
    data = Path(path).read_bytes()
    frames, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        frames.append(data[pos : pos + 4 + size].replace(CAPTURED.encode(), topic.encode(), 1))
        pos += 4 + size
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        received, sent, answered = bytearray(), 0, 0
        while answered < len(frames):
            while sent < len(frames) and sent - answered < REPLAY_IN_FLIGHT:
                sock.sendall(frames[sent])
                sent += 1
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise SystemExit(f"closed after {answered} answers")
            received += chunk
            while len(received) >= 4 and len(received) >= 4 + int.from_bytes(received[:4]):
                del received[: 4 + int.from_bytes(received[:4])]
                answered += 1


def bench(records: int, partitions: int, rounds: int) -> None:
    import redis as redis_py
    from broker_process import VALUE, embedded_broker, free_port, produce
    from confluent_kafka.admin import AdminClient, NewTopic
    from proc_cpu import measure

    print(
        f"{records} records of {len(VALUE)} bytes over {partitions} partitions, acks=1, "
        f"{rounds} rounds of each front end taking turns (cpus: {os.cpu_count()})"
    )
    live: dict[str, list[dict[str, float]]] = {"broker": [], "floor": []}
    replayed: dict[str, list[dict[str, float]]] = {"broker": [], "floor": [], "checked": []}
    with embedded_broker() as running, tempfile.TemporaryDirectory() as home:
        port = free_port()
        captured = str(Path(home) / "requests")
        floor = start_floor(running.redis_url, port, partitions, captured)
        checked_port = free_port()
        # Its capture file is never written (no request to CAPTURED reaches it).
        checked = start_floor(
            running.redis_url, checked_port, partitions, f"{captured}-unused", checked=True
        )
        client = redis_py.Redis.from_url(running.redis_url)
        # No AOF rewrites: the data of the rounds (~70 MB each) doubled the AOF about
        # every round, and each rewrite forked Redis and wrote all of it out while a round
        # ran (18 in one run): Redis' housekeeping, not a front end's cost.
        client.config_set("auto-aof-rewrite-percentage", 0)
        try:
            fronts = {
                "broker": (running.bootstrap, running.broker_pid, running.bootstrap),
                "floor": (f"127.0.0.1:{port}", floor.pid, f"127.0.0.1:{port}"),
            }
            checked_address = f"127.0.0.1:{checked_port}"
            replayed_fronts = {**fronts, "checked": (checked_address, checked.pid, checked_address)}
            admin = AdminClient({"bootstrap.servers": running.bootstrap})
            # A topic per round and front end, as in the live rounds: a partition the
            # rounds all appended to grew, and every process' CPU per record with it.
            replay_topics = [
                f"replay{r}{name[0]}" for r in range(rounds) for name in replayed_fronts
            ]
            topics = ["warm-up", CAPTURED, *(f"b{r}" for r in range(rounds)), *replay_topics]
            for future in admin.create_topics([NewTopic(t, partitions) for t in topics]).values():
                future.result(30)
            for bootstrap, _, _ in fronts.values():
                produce(bootstrap, "warm-up", 10_000, partitions)
            print("the same client (durability.py's producer), through each:")
            for r in range(rounds):
                for name in ("broker", "floor") if r % 2 == 0 else ("floor", "broker"):
                    bootstrap, pid, _ = fronts[name]
                    pids = {"front": pid, "redis": running.redis_pid, "client": None}
                    stats: list[str] = []  # librdkafka's, for the requests it sent
                    config = {"statistics.interval.ms": 100, "stats_cb": stats.append}
                    with measure(pids) as phase:
                        seconds = produce(bootstrap, f"b{r}", records, partitions, config=config)
                    used = phase.per_million(records)
                    live[name].append(used)
                    sent = sum(
                        b["req"].get("Produce", 0)
                        for b in json.loads(stats[-1])["brokers"].values()
                    )
                    print(
                        f"  round {r + 1} {name + ':':<8}{records / seconds:>10,.0f} records/s"
                        f"   front {used['front']:.2f}  redis {used['redis']:.2f}"
                        f"  client {used['client']:.2f} s of CPU per million records;"
                        f" {sent:,} produce requests (at least)"
                    )
                    if name == "floor":  # its lists are not the log: not kept
                        client.delete(*(f"floor:b{r}:{p}" for p in range(partitions)))
            # The requests the client sent the floor, written down, then sent to each
            # front end as they are: the same bytes, the same number of requests.
            produce(fronts["floor"][0], CAPTURED, records, partitions)
            client.delete(*(f"floor:{CAPTURED}:{p}" for p in range(partitions)))
            count = Path(captured).stat().st_size
            print(f"the same {count:,} bytes of produce requests, replayed to each:")
            order = list(replayed_fronts)
            for r in range(rounds):
                for name in order[r % 3 :] + order[: r % 3]:  # each goes first in turn
                    _, pid, address = replayed_fronts[name]
                    topic = f"replay{r}{name[0]}"
                    command = [sys.executable, __file__, "--replay-to", address.split(":")[1]]
                    command += ["--capture", captured, "--topic", topic]
                    with measure({"front": pid, "redis": running.redis_pid}) as phase:
                        subprocess.run(command, check=True)
                    used = phase.per_million(records)
                    replayed[name].append(used)
                    print(
                        f"  round {r + 1} {name + ':':<8}front {used['front']:.2f}"
                        f"  redis {used['redis']:.2f} s of CPU per million records"
                    )
                    if name != "broker":
                        client.delete(*(f"floor:{topic}:{p}" for p in range(partitions)))
                    else:  # the replay reads no answer's codes: the log says what it took
                        stored = stored_records(running.bootstrap, topic, partitions)
                        assert stored == records, f"{stored} of {records} records stored"
        finally:
            for proc in (floor, checked):
                proc.terminate()
                proc.wait(10)
    summary("the same client", live)
    summary("the same requests", replayed)


def stored_records(bootstrap: str, topic: str, partitions: int) -> int:
    """The records in ``topic`` (the sum of its partitions' end offsets) on the broker."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "produce-floor"})
    try:
        ends = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), 30) for p in range(partitions)
        ]
        return sum(high for _, high in ends)
    finally:
        consumer.close()


def summary(title: str, cpu: dict[str, list[dict[str, float]]]) -> None:
    """Medians of the rounds, and the ratios taken within each round."""

    def median(name: str, who: str) -> float:
        return statistics.median(c[who] for c in cpu[name])

    def ratios(values: list[float]) -> str:
        return (
            f"{statistics.median(values):.2f} x (per round {', '.join(f'{x:.2f}' for x in values)})"
        )

    pairs = list(zip(cpu["broker"], cpu["floor"], strict=True))
    checked = cpu.get("checked", [])
    print(f"{title}, medians, s of CPU per million records:")
    print(
        f"  broker {median('broker', 'front'):.2f}, Redis (in the broker's rounds)"
        f" {median('broker', 'redis'):.2f}, floor {median('floor', 'front'):.2f}"
        + (f", checked floor {median('checked', 'front'):.2f}" if checked else "")
    )
    print(
        f"  broker / Redis' {ratios([b['front'] / b['redis'] for b, _ in pairs])}; goal <= 0.50 x"
    )
    print(f"  floor / Redis'  {ratios([f['front'] / b['redis'] for b, f in pairs])}")
    if checked:
        print(
            "  checked floor / Redis' "
            + ratios([c["front"] / b["redis"] for b, c in zip(cpu["broker"], checked, strict=True)])
        )
    print(f"  broker / floor  {ratios([b['front'] / f['front'] for b, f in pairs])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4, choices=range(1, 11))
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the floor server
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    parser.add_argument("--capture", help=argparse.SUPPRESS)  # the requests written down
    parser.add_argument("--checked", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--replay-to", type=int, help=argparse.SUPPRESS)  # a port
    parser.add_argument("--topic", help=argparse.SUPPRESS)  # the replay's
    args = parser.parse_args()
    if args.serve is not None:
        keep_freed_memory()
        redis_path = args.redis_url.removeprefix("unix://")
        asyncio.run(serve(args.serve, redis_path, args.partitions, args.capture, args.checked))
    elif args.replay_to is not None:
        replay(args.replay_to, args.capture, args.topic)
    else:
        bench(args.records, args.partitions, args.rounds)


if __name__ == "__main__":
    main()
