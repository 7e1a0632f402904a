"""Chaos tests: marked ``chaos`` (deselect with ``-m "not chaos"``) and failed, not left
hanging, when they overrun their deadline: the alarm raises in the test, whose cleanup
then stops every server it started."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.deadline import failing_after

DEADLINE = 360  # seconds; a short run takes about 90


@pytest.fixture(autouse=True)
def deadline() -> Iterator[None]:
    with failing_after(DEADLINE):
        yield
