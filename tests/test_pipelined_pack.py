"""Commands packed for the shared connection (kafkaesque/hot/pipelined.py): what redis-py packs,
and the same again when a command's head is kept (CommandHeads)."""

from __future__ import annotations

import enum

import hiredis
from hypothesis import given
from hypothesis import strategies as st

from kafkaesque.hot.pipelined import CommandHeads, pack


class Level(enum.IntEnum):
    HIGH = 7


ARGS = st.lists(
    st.one_of(
        st.integers(-(2**70), 2**70),
        st.integers(-3, 2000),  # the small ints packed once
        st.text(max_size=12),
        st.binary(max_size=40),
        st.floats(allow_nan=False, allow_infinity=False),
    ),
    min_size=1,
    max_size=12,
)


def reference(args: list[object]) -> bytes:
    """The command as pack wrote it before it was made faster."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, int):
            arg = b"%d" % arg
        elif isinstance(arg, float):
            arg = repr(arg).encode()
        parts += (b"$%d\r\n" % len(arg), arg, b"\r\n")  # type: ignore[arg-type]
    return b"".join(parts)


def parsed(packed: bytes) -> object:
    reader = hiredis.Reader()
    reader.feed(packed)
    return reader.gets()


@given(ARGS)
def test_pack_writes_what_it_wrote(args: list[object]) -> None:
    assert pack(args) == reference(args)


def test_pack_of_odd_types() -> None:
    args = ["SET", Level.HIGH, True, memoryview(b"ab"), "é", b"", 1024, -1]
    assert pack(args) == reference(args)
    assert parsed(pack(args)) == [b"SET", b"7", b"1", b"ab", "é".encode(), b"", b"1024", b"-1"]


@given(ARGS, ARGS)
def test_a_kept_head_packs_the_same_command(head: list[object], rest: list[object]) -> None:
    heads = CommandHeads()
    for _ in range(2):  # packed, then kept
        assert heads.command(tuple(head), rest) == pack([*head, *rest])


def test_heads_are_bounded_oldest_first() -> None:
    heads = CommandHeads(limit=3)
    for i in range(5):
        heads.command(("EVALSHA", "sha", f"key{i}"), [i])
    assert len(heads) == 3
    assert set(heads._packed) == {("EVALSHA", "sha", f"key{i}") for i in (2, 3, 4)}
    assert heads.command(("EVALSHA", "sha", "key0"), [b"x"]) == pack(
        ["EVALSHA", "sha", "key0", b"x"]
    )
