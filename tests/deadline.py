"""A deadline for long tests: failed, not left hanging, when they overrun it."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

import pytest


@contextlib.contextmanager
def failing_after(seconds: int) -> Iterator[None]:
    """Fail the test running in the block once ``seconds`` have passed: the alarm raises
    in the test, whose cleanup then stops every server it started."""

    def expire(signum: int, frame: FrameType | None) -> None:
        pytest.fail(f"still running after {seconds} s: a hang", pytrace=True)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
