"""The Jepsen-style run is marked ``chaos`` (deselect with ``-m "not chaos"``) and failed,
not left hanging, past its deadline: the alarm raises in the test, whose cleanup then
stops every server it started."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.deadline import failing_after

DEADLINE = 240  # seconds; the short run takes about 50


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: fault injection against real servers (slow)")


@pytest.fixture(autouse=True)
def deadline(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("chaos") is None:
        yield
        return
    with failing_after(DEADLINE):
        yield
