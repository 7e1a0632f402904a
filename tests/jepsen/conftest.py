"""The Jepsen-style run is marked ``chaos`` (deselect with ``-m "not chaos"``) and failed,
not left hanging, past its deadline: the alarm raises in the test, whose cleanup then
stops every server it started."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from types import FrameType

import pytest

DEADLINE = 240  # seconds; the short run takes about 50


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: fault injection against real servers (slow)")


@pytest.fixture(autouse=True)
def deadline(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("chaos") is None:
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        pytest.fail(f"still running after {DEADLINE} s: a hang", pytrace=True)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(DEADLINE)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
