"""The guard in front of kio's parser: a flexible request claiming an impossible array is
refused as malformed; before it, kio reserved memory for the array and the broker aborted."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.wire.conftest import REPO
from wire.handlers import supported
from wire.protocol.array_guard import ArrayTooLong, check_flexible
from wire.protocol.codec import MalformedRequest, parse_request, request_schema

# AlterConfigs v2 whose configs array claims about 25 billion entries (found by the fuzzer).
CRASH = bytes.fromhex(
    "00210002000000bfffff0004130b66757a7a2d7468726565030219fa0161616161616161616161616161"
    "616161616161616161616161616161616161616161616161616161616161616161616161616161616161"
    "616161616161616161616161616161616161616161616161616161616161616161616161616161616161"
    "616161616161616161616161616161616161616161616161616161616161616161616161616161616161"
    "616161616161616161616161616161616161616161616161616161616161616161616161616161616161"
    "616161616161616161616161616161616161616161616161616161616161616161616161616161616161"
    "616161616161616161616161616161616161616161616161616100020008636f6d706163740000010966"
    "757a7a2d6f6e7fffffffbf5df2af9e97f3a3bb9cc296032e2e00000010714314c29405c381c282f183b2"
    "b22f03156b61666b6165737175652e6d61782e7061676573032d31000100000001000000000e00090009"
    "000000c0ffff000101000000000f00030007000000c1ffffffffffff00"
)


def test_an_impossible_compact_array_is_malformed_not_a_crash() -> None:
    # A parser that aborts takes the test process with it: parse in a child process.
    frame = CRASH
    code = (
        "import sys; from wire.protocol.codec import parse_request;"
        " from wire.handlers import supported;"
        f"parse_request(bytes.fromhex({frame.hex()!r}), supported())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr[-500:]
    assert "MalformedRequest" in done.stderr


def test_every_flexible_request_has_a_walk() -> None:
    flexible = [
        schema
        for key, (low, high) in supported().items()
        for version in range(low, high + 1)
        if (schema := request_schema(key, version)) is not None and schema.__flexible__
    ]
    assert len(flexible) > 50
    for schema in flexible:  # an empty body: a frame that ends early, never "no rule"
        with pytest.raises(ValueError) as refused:
            check_flexible(schema, b"", 0)
        assert "no rule" not in str(refused.value)


def test_a_length_beyond_the_frame_is_refused_and_a_fitting_one_is_not() -> None:
    schema = request_schema(32, 4)  # DescribeConfigs v4: resources, a compact array
    assert schema is not None
    with pytest.raises(ArrayTooLong):
        check_flexible(schema, b"\x80\x80\x80\x40", 0)  # about 134M resources
    check_flexible(schema, b"\x01\x00\x00\x00", 0)  # no resources, two bools, no tags
    with pytest.raises(MalformedRequest):
        parse_request(b"\x00\x20\x00\x04\x00\x00\x00\x01\xff\xff\x00\x80\x80\x80\x40", {32: (4, 4)})
