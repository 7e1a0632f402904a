"""Chaos tests: marked ``chaos`` (deselect with ``-m "not chaos"``) and failed, not left
hanging, when they overrun their deadline: the alarm raises in the test, whose cleanup
then stops every server it started."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.deadline import failing_after

DEADLINE = 360  # seconds; a short run takes about 90


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: fault injection against real servers (slow)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name == "chaos":
            item.add_marker(pytest.mark.chaos)


@pytest.fixture(autouse=True)
def deadline() -> Iterator[None]:
    with failing_after(DEADLINE):
        yield
