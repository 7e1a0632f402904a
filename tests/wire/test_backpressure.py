"""The broker under pressure, as Kafka's settings shape it: a memory budget for requests
(--queued-max-request-bytes) that makes connections wait rather than the broker swell, a
timeout for requests sent in part, limits on connections, and one traceback for a repeated
internal error rather than one per request."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import struct
import threading
import time
import urllib.request
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from prometheus_client.parser import text_string_to_metric_families

import wire.handlers
import wire.net.server
from kafkaesque.config.broker_settings import MAX_REQUEST_SIZE
from tests.kafka_client import (
    AsyncConnection,
    Connection,
    decode_response,
    encode_request,
    metadata_request,
    produce_request,
    request,
)
from tests.kafka_wire import run_with_broker
from tests.servers import free_port
from tests.wire.conftest import Broker
from wire.handlers import HANDLERS, Api
from wire.net.server import RequestBudget, Server

MiB = 1024 * 1024


def produce_frame(topic: str, size: int) -> tuple[Any, bytes]:
    """A produce request (correlation id 1) whose frame is ``size`` bytes after its size
    prefix; its records are zeros, which the broker refuses (INVALID_RECORD) after reading them."""
    overhead = len(encode_request(produce_request(topic, {0: b""}), 1)) - 4
    req = produce_request(topic, {0: bytes(size - overhead)})
    data = encode_request(req, 1)
    assert len(data) == size + 4
    return req, data


def memory_kib(pid: int, field: str) -> int:
    """A field of /proc/PID/status in KiB: VmRSS now, VmHWM the peak so far."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def metric(port: int, name: str, **labels: str) -> float:
    """One sample of the broker's Prometheus metrics (0 if absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def test_huge_requests_wait_for_the_budget_and_others_are_still_served(broker_factory) -> None:
    """Four clients send 100 MiB produce requests at once, each pausing half-way, to a broker
    with a 16 MiB budget: one is read at a time (each is larger than the budget), the others
    wait unread, the broker's memory stays near one request's, and small requests from other
    clients are answered meanwhile."""
    metrics_port = free_port()
    broker = broker_factory(
        "--queued-max-request-bytes",
        str(16 * MiB),
        "--metrics",
        f"127.0.0.1:{metrics_port}",
    )
    with Connection(broker.bootstrap) as conn:
        conn.create_topic("huge")
    baseline = memory_kib(broker.proc.pid, "VmHWM")
    req, data = produce_frame("huge", MAX_REQUEST_SIZE)
    view = memoryview(data)
    errors: list[ErrorCode] = []

    def send_huge() -> None:
        with Connection(broker.bootstrap, timeout=60) as c:
            c.send(view[: len(data) // 2])
            time.sleep(0.5)
            c.send(view[len(data) // 2 :])
            [topic] = c.read_response(req, 1).responses
            errors.append(topic.partition_responses[0].error_code)

    senders = [threading.Thread(target=send_huge) for _ in range(4)]
    for t in senders:
        t.start()
    waiting, rss, slowest = 0.0, 0, 0.0
    while any(t.is_alive() for t in senders):
        started = time.monotonic()
        with Connection(broker.bootstrap) as c:
            assert c.api_versions().error_code == ErrorCode.none
            [topic] = c.metadata(["huge"]).topics
            assert topic.error_code == ErrorCode.none
        slowest = max(slowest, time.monotonic() - started)
        waiting = max(waiting, metric(metrics_port, "kafkaesque_connections_waiting_for_memory"))
        rss = max(rss, memory_kib(broker.proc.pid, "VmRSS"))
        time.sleep(0.05)
    for t in senders:
        t.join()
    peak = memory_kib(broker.proc.pid, "VmHWM")
    print(f"broker RSS, MiB: {baseline // 1024} before, {rss // 1024} sampled, {peak // 1024} peak")
    assert errors == [ErrorCode.invalid_record] * 4
    assert waiting >= 2, "the big requests were never waiting for one another"
    assert slowest < 1.0, f"a small request took {slowest:.2f} s while big ones were read"
    # One 100 MiB request in memory at a time (with the copy parsing makes), not four.
    assert (peak - baseline) // 1024 < 250, f"peak {peak // 1024} MiB from {baseline // 1024}"
    assert metric(metrics_port, "kafkaesque_queued_request_bytes") == 0


def test_budget_serves_waiters_in_order() -> None:
    async def scenario() -> None:
        budget = RequestBudget(100)
        await budget.reserve(60)
        order: list[str] = []

        async def take(name: str, size: int) -> None:
            await budget.reserve(size)
            order.append(name)

        big = asyncio.create_task(take("big", 80))
        await asyncio.sleep(0)
        small = asyncio.create_task(take("small", 10))  # fits, but the big one came first
        cancelled = asyncio.create_task(take("cancelled", 90))
        huge = asyncio.create_task(take("huge", 500))  # over the budget: beside it
        await asyncio.sleep(0.01)
        assert order == ["huge"] and budget.waiting == 3
        cancelled.cancel()
        budget.release(60)
        await asyncio.gather(big, small, return_exceptions=True)
        assert order == ["huge", "big", "small"] and budget.reserved == 90
        second_huge = asyncio.create_task(take("second huge", 200))
        await asyncio.sleep(0.01)
        assert not second_huge.done()  # one request over the budget at a time
        budget.release(500)
        await asyncio.gather(huge, second_huge)
        for size in (80, 10, 200):
            budget.release(size)
        assert (budget.reserved, budget.beside, budget.waiting) == (0, 0, 0)

    asyncio.run(scenario())


def test_a_stalled_request_is_closed_and_its_budget_released(broker_factory) -> None:
    broker = broker_factory("--request-timeout-ms", "500", "--queued-max-request-bytes", "2000")
    with Connection(broker.bootstrap) as conn:
        conn.create_topic("stalled")
    mark = broker.stderr_size()
    req, data = produce_frame("stalled", 1500)
    with (
        Connection(broker.bootstrap) as stalled,
        Connection(broker.bootstrap) as half_size,
        Connection(broker.bootstrap) as waiting,
    ):
        stalled.send(data[:700])  # reserves 1500 of the 2000, then stops
        half_size.send(data[:2])
        time.sleep(0.1)
        started = time.monotonic()
        waiting.send(data)  # needs 1500 too: waits for the stalled request to go
        [topic] = waiting.read_response(req, 1).responses
        waited = time.monotonic() - started
        assert topic.partition_responses[0].error_code == ErrorCode.invalid_record
        assert stalled.closed_by_server() and half_size.closed_by_server()
    assert 0.2 < waited < 3, f"answered after {waited:.2f} s"
    lines = broker.stderr(mark).splitlines()
    assert sum("request stalled: 696 of 1500 bytes" in line for line in lines) == 1, lines
    assert sum("request stalled: a partial size" in line for line in lines) == 1, lines


def refused(sock: socket.socket) -> bool:
    """True when the server closes ``sock`` without a word."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def api_versions_on(sock: socket.socket) -> ErrorCode:
    req = request(18, 0)
    sock.sendall(encode_request(req, 7))
    prefix = sock.recv(4, socket.MSG_WAITALL)
    frame = sock.recv(struct.unpack(">i", prefix)[0], socket.MSG_WAITALL)
    return decode_response(18, 0, frame, 7).error_code


def connect(broker: Broker, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), 5, source_address=(source, 0))


def without_connections(broker: Broker, metrics_port: int) -> None:
    """Wait until the broker has accepted, and seen the close of, the connection that found
    it listening (under load its accept can come after the client closed it: a count of 0
    before that accept is no proof)."""
    for _ in range(500):
        accepted = metric(metrics_port, "kafkaesque_accepted_connections_total")
        if accepted >= 1 and metric(metrics_port, "kafkaesque_connections") == 0:
            return
        time.sleep(0.02)
    pytest.fail("the broker still counts a connection")


def test_max_connections(broker_factory) -> None:
    metrics_port = free_port()
    broker = broker_factory("--max-connections", "5", "--metrics", f"127.0.0.1:{metrics_port}")
    without_connections(broker, metrics_port)
    mark = broker.stderr_size()
    accepted = [connect(broker) for _ in range(5)]
    assert all(api_versions_on(s) == ErrorCode.none for s in accepted)
    burst = [connect(broker) for _ in range(20)]
    assert all(refused(s) for s in burst)
    assert (
        metric(metrics_port, "kafkaesque_refused_connections_total", limit="max-connections") == 20
    )
    logged = broker.stderr(mark)
    assert logged.count("refusing connection") == 1, logged  # once for the burst
    assert "--max-connections 5 reached" in logged
    accepted.pop().close()
    for _ in range(50):  # the broker notices the close
        with connect(broker) as s:
            if _answered(s):
                break
        time.sleep(0.05)
    else:
        pytest.fail("a connection was refused after one of the five closed")
    for s in accepted + burst:
        s.close()


def _answered(sock: socket.socket) -> bool:
    try:
        return api_versions_on(sock) == ErrorCode.none
    except (ConnectionError, struct.error):
        return False


def test_max_connections_per_ip(broker_factory) -> None:
    metrics_port = free_port()
    broker = broker_factory(
        "--max-connections-per-ip", "2", "--metrics", f"127.0.0.1:{metrics_port}"
    )
    without_connections(broker, metrics_port)
    mark = broker.stderr_size()
    mine = [connect(broker) for _ in range(2)]
    assert all(api_versions_on(s) == ErrorCode.none for s in mine)
    extra = [connect(broker) for _ in range(3)]
    assert all(refused(s) for s in extra)
    with connect(broker, source="127.0.0.2") as other:  # another address has its own count
        assert api_versions_on(other) == ErrorCode.none
    logged = broker.stderr(mark)
    assert logged.count("refusing connection") == 1, logged
    assert "--max-connections-per-ip 2 reached" in logged
    for s in mine + extra:
        s.close()


def test_a_repeated_internal_error_logs_one_traceback_then_counts(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(broker: Any, req: Any) -> Any:
        raise RuntimeError("a bug")

    table = dict(HANDLERS)
    table[3] = Api(HANDLERS[3].min_version, HANDLERS[3].max_version, broken)
    monkeypatch.setattr(wire.handlers, "HANDLERS", table)
    caplog.set_level(logging.INFO, logger="wire.net.server")

    async def scenario(server: Server) -> None:
        server.throttle.interval = 0.5
        for _ in range(2):
            for _ in range(10):
                c = await AsyncConnection.connect(server.port)
                await c.send_request(metadata_request(["x"]))
                assert await c.closed_by_server()
                await c.close()
            await asyncio.sleep(1.2)  # the count, then a quiet interval

    asyncio.run(run_with_broker(redis_url, scenario))
    records = [
        r for r in caplog.records if r.name == "wire.net.server" and r.levelno >= logging.ERROR
    ]
    messages = [r.getMessage() for r in records]
    # Each round: one traceback, then lines counting the other nine (one line, unless the
    # round outlasted an interval).
    assert [r.exc_info is not None for r in records].count(True) == 2, messages
    assert records[0].exc_info is not None and records[-1].exc_info is None, messages
    counted = [
        re.fullmatch(
            r"connections closed after the internal error RuntimeError at "
            r".*test_backpressure\.py:\d+: (\d+) more in the last 0.5 s",
            m,
        )
        for r, m in zip(records, messages, strict=True)
        if r.exc_info is None
    ]
    assert all(counted) and sum(int(m[1]) for m in counted if m) == 18, messages
