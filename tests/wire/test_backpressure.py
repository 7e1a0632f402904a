"""The broker under pressure: one traceback for a repeated internal error rather than one
per request."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import pytest

import wire.server
from tests.kafka_client import AsyncConnection, metadata_request
from tests.kafka_wire import run_with_broker
from wire.handlers import HANDLERS, Api
from wire.server import Server


def test_a_repeated_internal_error_logs_one_traceback_then_counts(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(broker: Any, req: Any) -> Any:
        raise RuntimeError("a bug")

    table = dict(HANDLERS)
    table[3] = Api(HANDLERS[3].min_version, HANDLERS[3].max_version, broken)
    monkeypatch.setattr(wire.server, "HANDLERS", table)
    caplog.set_level(logging.INFO, logger="wire.server")

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
    records = [r for r in caplog.records if r.name == "wire.server" and r.levelno >= logging.ERROR]
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
