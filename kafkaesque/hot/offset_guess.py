"""Batches sent to Redis with the offsets they will get already written in.

append.lua writes each batch's baseOffset and partitionLeaderEpoch (kafkaesque.records.batch
has the layout). Rewriting them in Lua builds two new strings the size of the batch, and
Valkey hashes every byte of a Lua string: for a batch of 1 MB that was half of the
append's Redis time (docs/benchmarks.md). A batch that arrives with the right values is
stored as sent. So a Log keeps, per partition it appends to, the offset its next batch
should get and the partition's leader epoch, and writes them into the batches it sends.

A guess is only ever a guess: append.lua compares the bytes and rewrites them when they
differ (another writer appended, an idempotent retry took its old offset, a failover
raised the epoch), which is what every append cost before. The reply tells the truth,
and the next guesses follow it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from kafkaesque.records.batch import offset_count, with_base_offset

# Smaller batches are sent as they are: Lua rewrites them for about what the copy here
# would cost.
PLACE_FROM = 1024
# Partitions remembered at most (each entry is small; a topic deleted elsewhere leaves its
# entries behind): past it they are all forgotten and learnt again from the next replies.
MAX_PARTITIONS = 100_000


@dataclass(slots=True)
class Guess:
    """What one append was sent with: the first batch's offset, under a generation."""

    base: int
    generation: int


@dataclass(slots=True)
class _Next:
    offset: int  # after every append sent so far
    epoch: int
    generation: int  # bumped on every correction: guesses made before it are stale


class OffsetGuesses:
    """Per partition, the offset and leader epoch this Log's next batch should get."""

    def __init__(self) -> None:
        self._next: dict[tuple[str, int], _Next] = {}
        self._generations = itertools.count(1)

    def place(
        self, topic: str, partition: int, batches: Sequence[bytes]
    ) -> tuple[Sequence[bytes], Guess | None]:
        """The batches with their expected offsets and the epoch written in (those of
        PLACE_FROM bytes or more), and the guess to give ``learn`` with the reply; the
        batches as they are and None before the partition's first reply."""
        nxt = self._next.get((topic, partition))
        if nxt is None:
            return batches, None
        guess = Guess(nxt.offset, nxt.generation)
        placed = []
        offset = nxt.offset
        for batch in batches:
            if len(batch) >= PLACE_FROM:
                batch = with_base_offset(batch, offset, nxt.epoch)
            placed.append(batch)
            offset += offset_count(batch)
        nxt.offset = offset  # a pipelined append sent before this one's reply follows it
        return placed, guess

    def learn(
        self,
        topic: str,
        partition: int,
        guess: Guess | None,
        bases: Sequence[int],
        batches: Sequence[bytes],
        epoch: int,
    ) -> None:
        """An append's reply: its ``batches``' base offsets and the partition's epoch."""
        if not bases:
            return
        key = (topic, partition)
        nxt = self._next.get(key)
        if nxt is None:
            if len(self._next) >= MAX_PARTITIONS:
                self._next.clear()
            end = bases[-1] + offset_count(batches[-1])
            self._next[key] = _Next(end, epoch, next(self._generations))
        elif guess is not None and guess.generation == nxt.generation:
            nxt.epoch = epoch
            if bases[0] != guess.base:
                # Every append sent since was guessed as wrongly: shift them all once;
                # their replies (of the old generation) correct nothing more.
                nxt.offset += bases[0] - guess.base
                nxt.generation = next(self._generations)
