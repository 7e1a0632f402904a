"""Batches sent with their expected offsets written in (kafkaesque.hot.log_appends
OffsetGuesses): a right guess is stored as sent, a wrong one is rewritten, and either way
every batch is stored with the offset and leader epoch the partition gave it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot import log_appends
from kafkaesque.hot.log import Log
from kafkaesque.hot.log_appends import PLACE_FROM, OffsetGuesses
from kafkaesque.hot.pipelined import Pieces, pack
from kafkaesque.records.batch import base_offset, check_batch, read_header
from kafkaesque.records.build import build_batch

# Large enough to be placed (PLACE_FROM), in records of 100 bytes.
BIG = PLACE_FROM // 100 + 1


def big_batch(tag: bytes, records: int = BIG) -> bytes:
    return build_batch([tag + b"v" * 99] * records, timestamp=1_700_000_000_000)


async def stored_batches(log: Log, topic: str) -> list[bytes]:
    """Every batch of partition 0, as Redis holds it."""
    out: list[bytes] = []
    offset = 0
    while True:
        result = await log.read(topic, 0, offset, max_bytes=1 << 20)
        if not result.batches:
            return out
        out += result.batches
        offset = base_offset(out[-1]) + read_header(out[-1]).last_offset_delta + 1


def test_placed_batches_carry_the_next_offsets_and_epoch() -> None:
    guesses = OffsetGuesses()
    first = [big_batch(b"a"), big_batch(b"b")]
    sent, guess = guesses.place("t", 0, first)
    assert guess is None and list(sent) == first  # nothing is known before a reply
    guesses.learn("t", 0, guess, [10, 10 + BIG], first, 3)
    sent, guess = guesses.place("t", 0, [big_batch(b"c"), build_batch([b"small"])])
    assert guess is not None and guess.base == 10 + 2 * BIG
    header = read_header(sent[0])
    assert (header.base_offset, header.partition_leader_epoch) == (10 + 2 * BIG, 3)
    check_batch(sent[0])  # both fields are outside the CRC
    assert base_offset(sent[1]) == 0  # a small batch goes as it is
    # A pipelined append sent before the reply follows the one before it.
    sent, _ = guesses.place("t", 0, [big_batch(b"d")])
    assert base_offset(sent[0]) == 10 + 3 * BIG + 1


def test_placed_as_pieces_packs_the_same_command() -> None:
    """A batch placed as Pieces (its new first bytes, then a view of the rest: no copy of
    the batch) is packed into the same command as the placed copy."""
    copies, pieces = OffsetGuesses(), OffsetGuesses()
    first = [big_batch(b"a")]
    for guesses in (copies, pieces):
        guesses.learn("t", 0, None, [7], first, 2)
    batches = [big_batch(b"b"), build_batch([b"small"]), big_batch(b"c")]
    copied, _ = copies.place("t", 0, batches)
    sent, _ = pieces.place("t", 0, batches, pieces=True)
    assert isinstance(sent[0], Pieces) and isinstance(sent[2], Pieces)
    assert sent[1] is batches[1]  # a small batch goes as it is
    assert [b"".join(b) if isinstance(b, Pieces) else b for b in sent] == list(copied)
    assert pack(["EVALSHA", 1, *sent]) == pack(["EVALSHA", 1, *copied])


def test_a_wrong_guess_corrects_every_append_in_flight_once() -> None:
    guesses = OffsetGuesses()
    one = big_batch(b"x")
    guesses.learn("t", 0, None, [0], [one], 0)
    in_flight = [guesses.place("t", 0, [one])[1] for _ in range(3)]  # BIG, 2 BIG, 3 BIG
    # Another writer appended 7 offsets first: each reply is 7 past its guess.
    for guess in in_flight:
        assert guess is not None
        guesses.learn("t", 0, guess, [guess.base + 7], [one], 0)
    sent, guess = guesses.place("t", 0, [one])
    assert guess is not None and base_offset(sent[0]) == 4 * BIG + 7  # shifted once, not 3x


def test_two_writers_and_a_new_epoch_store_the_right_offsets(
    make_log: Callable[[], Log],
) -> None:
    """Two Logs appending in turn guess wrong every time; then the partition's epoch
    moves under a guess. Every batch is stored with its own offset and the epoch."""

    async def scenario() -> None:
        one, other = make_log(), make_log()
        await one.create_topic(TopicConfig("t", 1, page_size=BIG * 3))
        bases: list[int] = []
        for i in range(6):
            writer = one if i % 2 == 0 else other
            bases += (await writer.append("t", 0, [big_batch(b"%d" % i)])).base_offsets
        meta = one.keys.partition("t", 0).meta
        await one.redis.hset(meta, "epoch", 7)  # as a failover would
        bases += (await one.append("t", 0, [big_batch(b"e")])).base_offsets
        bases += (await one.append("t", 0, [big_batch(b"f")])).base_offsets
        assert bases == [i * BIG for i in range(8)]
        stored = await stored_batches(one, "t")
        assert [base_offset(b) for b in stored] == bases
        epochs = [read_header(b).partition_leader_epoch for b in stored]
        assert epochs[-2:] == [7, 7] and set(epochs[:-2]) == {epochs[0]} != {7}
        for b in stored:
            check_batch(b)

    asyncio.run(scenario())


def test_steady_appends_are_sent_already_placed(make_log: Callable[[], Log]) -> None:
    """After its first reply, a Log's appends to a partition go out with the offsets the
    partition then gives them (what spares Redis rewriting them)."""

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 1))
        sent: list[bytes] = []
        real = log.appends._append_call

        def spy(
            topic: str, partition: int, batches: Sequence[bytes], *rest: Any, **named: Any
        ) -> Any:
            # The batches as sent: placed (a Pieces: its new first bytes, then the rest).
            placed = named.get("sent") or batches
            sent.extend(b"".join(b) if isinstance(b, Pieces) else b for b in placed)
            return real(topic, partition, batches, *rest, **named)

        log.appends._append_call = spy  # type: ignore[method-assign]
        await log.append("t", 0, [big_batch(b"a"), big_batch(b"b")])
        assert [base_offset(b) for b in sent] == [0, 0]  # as built: nothing known yet
        for i in range(3):
            appended = await log.append("t", 0, [big_batch(b"c"), big_batch(b"d")])
            assert appended.base_offsets == [(2 * i + 2) * BIG, (2 * i + 3) * BIG]
            assert [base_offset(b) for b in sent[-2:]] == appended.base_offsets

    asyncio.run(scenario())


def test_an_empty_append_and_many_partitions_are_handled(
    make_log: Callable[[], Log], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append of no batches writes nothing and answers no offsets; the guesses kept
    stay bounded however many partitions a Log appends to."""
    monkeypatch.setattr(log_appends, "MAX_PARTITIONS", 3)

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("t", 5))
        assert (await log.append("t", 0, [])).base_offsets == []
        for p in range(5):
            await log.append("t", p, [big_batch(b"a")])
            assert len(log.appends.guesses._next) <= 3
        assert (await log.append("t", 4, [big_batch(b"b")])).base_offsets == [BIG]

    asyncio.run(scenario())
