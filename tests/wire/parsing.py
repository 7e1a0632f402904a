"""Checks shared by the tests of the hand-written request parsers."""

from __future__ import annotations

import pytest

from wire.protocol.codec import MalformedRequest, parse_request


def assert_truncations_refused(frame: bytes, supported: dict[int, tuple[int, int]]) -> None:
    """Every prefix of ``frame``, and ``frame`` with one byte too many, is refused."""
    for size in range(len(frame)):
        with pytest.raises(MalformedRequest):
            parse_request(frame[:size], supported)
    with pytest.raises(MalformedRequest):
        parse_request(frame + b"\0", supported)
