"""The connection's socket protocol (wire/net/stream.py ClientStream) on a recording
transport: requests taken from received chunks, back-pressure on reading, answers of
one loop turn sent together, what abort and drain do."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from wire.net.stream import FLUSH_AT, HIGH_WATER, LOW_WATER, ClientStream


class RecordingTransport:
    """What the stream asked of its transport."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.paused = 0
        self.resumed = 0
        self.aborted = False
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def pause_reading(self) -> None:
        self.paused += 1

    def resume_reading(self) -> None:
        self.resumed += 1

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.aborted or self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


async def _idle(stream: ClientStream) -> None:
    """The connection's task: nothing (the tests drive the stream)."""


def connected() -> tuple[ClientStream, RecordingTransport]:
    stream = ClientStream(_idle)
    transport = RecordingTransport()
    stream.connection_made(transport)  # type: ignore[arg-type]
    return stream, transport


def test_requests_are_taken_across_chunks_and_a_short_end_is_incomplete() -> None:
    async def run() -> None:
        stream, _ = connected()
        stream.data_received(b"\0\0\0\x05ab")
        assert stream.take_now(4) == b"\0\0\0\x05"
        assert stream.take_now(5) is None  # 2 of its 5 bytes here: nothing taken
        stream.data_received(b"cdefg")
        assert bytes(await stream.readexactly(5)) == b"abcde"
        assert stream.buffered == 2
        stream.eof_received()
        with pytest.raises(asyncio.IncompleteReadError) as raised:
            await stream.readexactly(3)
        assert raised.value.partial == b"fg"

    asyncio.run(run())


def test_a_read_waits_for_bytes_and_fails_with_the_stream() -> None:
    async def run() -> None:
        stream, _ = connected()
        waiting = asyncio.create_task(stream.readexactly(3))
        await asyncio.sleep(0)
        stream.data_received(b"xy")
        await asyncio.sleep(0)
        assert not waiting.done()
        stream.data_received(b"z")
        assert bytes(await waiting) == b"xyz"
        late = asyncio.create_task(stream.read(10))
        await asyncio.sleep(0)
        stream.set_exception(TimeoutError("idle"))
        with pytest.raises(TimeoutError):
            await late

    asyncio.run(run())


def test_reading_pauses_above_the_high_water_and_resumes_below_the_low() -> None:
    async def run() -> None:
        stream, transport = connected()
        chunk = bytes(32 << 10)
        while stream.buffered <= HIGH_WATER:
            assert transport.paused == 0
            stream.data_received(chunk)
        assert transport.paused == 1
        stream.data_received(chunk)  # still paused: not paused again
        assert transport.paused == 1
        stream.take_now(stream.buffered - LOW_WATER - 1)
        assert transport.resumed == 0
        stream.take_now(1)
        assert transport.resumed == 1

    asyncio.run(run())


def test_answers_of_one_turn_go_out_in_one_write() -> None:
    async def run() -> None:
        stream, transport = connected()
        stream.write(b"first ")
        stream.write(b"second")
        assert transport.writes == []
        await asyncio.sleep(0)  # the end of the turn
        assert transport.writes == [b"first second"]
        large = bytes(FLUSH_AT)
        stream.write(b"small")
        stream.write(large)  # at once, after what was before it, not copied into a join
        assert transport.writes[1:] == [b"small", large]

    asyncio.run(run())


def test_abort_sends_what_was_written_before_it() -> None:
    async def run() -> None:
        stream, transport = connected()
        stream.write(b"answer")
        stream.abort()
        assert transport.writes == [b"answer"]
        assert transport.aborted

    asyncio.run(run())


def test_drain_waits_while_the_client_is_behind_and_fails_once_it_is_gone() -> None:
    async def run() -> None:
        stream, _ = connected()
        await stream.drain()  # not paused: at once
        stream.pause_writing()
        draining = asyncio.create_task(stream.drain())
        await asyncio.sleep(0)
        assert not draining.done()
        stream.resume_writing()
        await draining
        stream.pause_writing()
        draining = asyncio.create_task(stream.drain())
        await asyncio.sleep(0)
        stream.connection_lost(None)
        with pytest.raises(ConnectionResetError):
            await draining
        with pytest.raises(ConnectionResetError):
            await stream.drain()
        await stream.wait_closed()

    asyncio.run(run())
