"""The outage log: one line when a server goes, naming why; a connection that broke
mid-reply alone is not an outage, nor the reason given when a reconnection meets one; one
line when it is back, once no failure came for a while (successes between failures, as
with one node of a Redis Cluster away, do not end it)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from redis.exceptions import ConnectionError

from kafkaesque.clock import ManualClock
from kafkaesque.hot.outage import RECOVERY_HOLD, Outage

RESET = ConnectionError("Error while reading from 127.0.0.1:6379 : (104, 'Connection reset')")
REFUSED = ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test.outage"]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def outage(caplog: pytest.LogCaptureFixture, clock: ManualClock) -> Outage:
    """An outage log of Redis on a manual clock, whose warnings ``lines`` returns."""
    caplog.set_level(logging.WARNING, logger="test.outage")
    return Outage("Redis", logging.getLogger("test.outage"), clock)


def advance(clock: ManualClock, seconds: float) -> None:
    asyncio.run(clock.advance(seconds))


def test_a_broken_reply_then_a_refusal_reports_the_refusal(
    outage: Outage, caplog: pytest.LogCaptureFixture, clock: ManualClock
) -> None:
    outage.failed(RESET)
    assert lines(caplog) == []
    outage.failed(REFUSED)
    outage.failed(RESET)
    assert lines(caplog) == [
        "cannot reach Redis: 127.0.0.1:6379 (connection refused); retrying until it is back"
    ]
    advance(clock, RECOVERY_HOLD)
    outage.recovered()
    assert lines(caplog)[-1] == f"Redis available again after {RECOVERY_HOLD:.1f} s"


def test_a_one_off_break_is_no_outage_but_a_recurring_one_is(
    outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    outage.failed(RESET)
    outage.recovered()  # the next try worked
    assert lines(caplog) == []
    outage.failed(RESET)
    outage.failed(RESET)
    assert len(lines(caplog)) == 1 and "127.0.0.1:6379 (connection reset)" in lines(caplog)[0]


def test_successes_between_failures_do_not_end_the_outage(
    outage: Outage, caplog: pytest.LogCaptureFixture, clock: ManualClock
) -> None:
    """One node of a cluster away: the others answer between its failures."""
    for _ in range(20):
        outage.failed(REFUSED)
        advance(clock, 0.1)
        outage.recovered()
        advance(clock, 0.1)
    assert len(lines(caplog)) == 1 and lines(caplog)[0].startswith("cannot reach Redis")
    advance(clock, RECOVERY_HOLD)  # the node is back: no failure since
    outage.recovered()
    assert lines(caplog)[1:] == ["Redis available again after 5.0 s"]
    outage.recovered()
    outage.failed(REFUSED)  # a new outage is reported again
    assert len(lines(caplog)) == 3 and lines(caplog)[2].startswith("cannot reach Redis")
