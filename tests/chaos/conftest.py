"""Chaos tests: marked ``chaos`` (deselect with ``-m "not chaos"``) and failed, not left
hanging, when they overrun their deadline: the alarm raises in the test, whose cleanup
then stops every server it started."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from types import FrameType

import pytest

DEADLINE = 360  # seconds; a short run takes about 90


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: fault injection against real servers (slow)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name == "chaos":
            item.add_marker(pytest.mark.chaos)


@pytest.fixture(autouse=True)
def deadline() -> Iterator[None]:
    def expire(signum: int, frame: FrameType | None) -> None:
        pytest.fail(f"still running after {DEADLINE} s: a hang", pytrace=True)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(DEADLINE)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
