"""Slow and hostile clients (slowloris) against the request-memory budget: a connection that
announces the largest request and sends nothing, or dribbles it a kilobyte at a time, must
not hold up other clients, and is closed once the request timeout has passed."""

from __future__ import annotations

import asyncio
import struct
import time

from kio.schema.errors import ErrorCode

from kafkaesque.config.broker_settings import MAX_REQUEST_SIZE
from kafkaesque.records.build import build_batch
from tests.kafka_client import (
    AsyncConnection,
    Connection,
    fetch_request,
    metadata_request,
    produce_request,
    request,
)

REQUEST_TIMEOUT_S = 3
CLIENTS = 50
RUN_S = 6.0


def test_stalled_and_dribbling_requests_hold_up_no_one(broker_factory) -> None:
    """With the default budget and largest request (100 MiB each), one connection announces
    the largest request and stalls, another dribbles 1 KiB every 0.5 s, a third and fourth
    announce 60 MiB each and stall; meanwhile 50 clients produce, fetch and ask for
    metadata: every request is answered within 2 s, and the slow connections are closed by
    the request timeout (the dribbler too, though it never stops for long)."""
    broker = broker_factory("--request-timeout-ms", str(REQUEST_TIMEOUT_S * 1000))
    with Connection(broker.bootstrap) as conn:
        conn.create_topic("slow", partitions=4)
    mark = broker.stderr_size()
    batch = build_batch([b"v" * 100] * 10)

    async def scenario() -> tuple[list[float], dict[str, float | None]]:
        def announce(size: int) -> bytes:  # a produce request's header, then nothing
            return struct.pack(">ihhi", size, 0, 9, 1)

        attackers = {
            "stalled": await AsyncConnection.connect(broker.port),
            "dribbler": await AsyncConnection.connect(broker.port),
            "stalled-60": await AsyncConnection.connect(broker.port),
            "stalled-60b": await AsyncConnection.connect(broker.port),
        }
        await attackers["stalled"].send(announce(MAX_REQUEST_SIZE))
        await attackers["dribbler"].send(announce(MAX_REQUEST_SIZE))
        await attackers["stalled-60"].send(announce(60 << 20))
        await attackers["stalled-60b"].send(announce(60 << 20))
        started = time.monotonic()
        closed: dict[str, float | None] = dict.fromkeys(attackers)

        async def watch(name: str) -> None:
            if await attackers[name].closed_by_server(4 * REQUEST_TIMEOUT_S + 4):
                closed[name] = time.monotonic() - started

        async def dribble() -> None:
            while (
                closed["dribbler"] is None
                and time.monotonic() - started < 4 * REQUEST_TIMEOUT_S + 4
            ):
                try:
                    await attackers["dribbler"].send(b"\0" * 1024)
                except ConnectionError:
                    return
                await asyncio.sleep(0.5)

        latencies: list[float] = []

        async def client(i: int) -> None:
            conn = await AsyncConnection.connect(broker.port)
            partition, offset = i % 4, 0
            try:
                while time.monotonic() - started < RUN_S:
                    for req in (
                        request(18, 2),
                        metadata_request(["slow"]),
                        produce_request("slow", {partition: batch}),
                        fetch_request("slow", {partition: offset}),
                    ):
                        sent = time.monotonic()
                        resp = await asyncio.wait_for(conn.request(req), 10)
                        latencies.append(time.monotonic() - sent)
                        if req.__api_key__ == 0:
                            answer = resp.responses[0].partition_responses[0]
                            assert answer.error_code == ErrorCode.none, answer
                            offset = answer.base_offset
            finally:
                await conn.close()

        watchers = [asyncio.create_task(watch(name)) for name in attackers]
        dribbling = asyncio.create_task(dribble())
        await asyncio.gather(*(client(i) for i in range(CLIENTS)))
        await asyncio.gather(*watchers, dribbling)
        for conn in attackers.values():
            await conn.close()
        return latencies, closed

    latencies, closed = asyncio.run(scenario())
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)]
    print(
        f"{len(latencies)} requests from {CLIENTS} clients under attack: "
        f"p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
        f"max {latencies[-1] * 1000:.1f} ms; closed after {closed}"
    )
    assert latencies[-1] < 2, f"slowest answer took {latencies[-1]:.2f} s"
    for name, after in closed.items():
        assert after is not None, f"{name} was not closed"
        # Large requests are received one at a time: each waits for those before it.
        assert after < 4 * REQUEST_TIMEOUT_S + 3, (name, after)
    assert min(closed.values()) < REQUEST_TIMEOUT_S + 2  # type: ignore[type-var]
    log = broker.stderr(mark)
    assert f"request not received within {REQUEST_TIMEOUT_S} s" in log, log[-3000:]
