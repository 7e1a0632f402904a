"""The outage log: one line when a server goes, naming why; a connection that broke
mid-reply alone is not an outage, nor the reason given when a reconnection meets one."""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import ConnectionError

from kafkaesque.hot.outage import Outage

RESET = ConnectionError("Error while reading from 127.0.0.1:6379 : (104, 'Connection reset')")
REFUSED = ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test.outage"]


@pytest.fixture
def outage(caplog: pytest.LogCaptureFixture) -> Outage:
    """An outage log of Redis whose warnings ``lines`` returns."""
    caplog.set_level(logging.WARNING, logger="test.outage")
    return Outage("Redis", logging.getLogger("test.outage"))


def test_a_broken_reply_then_a_refusal_reports_the_refusal(
    outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    outage.failed(RESET)
    assert lines(caplog) == []
    outage.failed(REFUSED)
    outage.failed(RESET)
    assert lines(caplog) == [
        "cannot reach Redis: 127.0.0.1:6379 (connection refused); retrying until it is back"
    ]
    outage.recovered()
    assert lines(caplog)[-1].startswith("Redis available again after")


def test_a_one_off_break_is_no_outage_but_a_recurring_one_is(
    outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    outage.failed(RESET)
    outage.recovered()  # the next try worked
    assert lines(caplog) == []
    outage.failed(RESET)
    outage.failed(RESET)
    assert len(lines(caplog)) == 1 and "127.0.0.1:6379 (connection reset)" in lines(caplog)[0]
