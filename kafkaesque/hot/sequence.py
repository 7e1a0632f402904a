"""Record ids on a Redis Cluster: a per-slot hybrid logical clock (docs/scale-out.md 3).

Each slot holding partitions counts in its own hash (``Keys.slot_hash``, field ``seq``);
append.lua gives an append's records the next counter values ``l``, never below the floor
the broker passes (``clock(now)``), and the record's id is ``record_id(l, slot)``: the slot
in the low 14 bits, so ids of different slots never collide and ids of one partition grow
with its offsets. ``l`` counts 1/256 ms since 2025-01-01, below 2^49 until 2094: exact in
Lua's doubles, and ``record_id`` fits ``record.id`` (a bigint).

On a single Redis nothing of this applies: one counter (``ks:gseq``), floor 0, id = ``l``.
"""

from __future__ import annotations

from kafkaesque.hot.slots import SLOTS

SLOT_BITS = 14
# 2025-01-01T00:00:00Z in ms; the clock counts 256 steps per ms from there.
EPOCH_MS = 1_735_689_600_000
STEPS_PER_MS = 256
# The largest counter value an id can hold (2^49 - 1: the year 2094).
MAX_COUNTER = (1 << 49) - 1

assert 1 << SLOT_BITS == SLOTS


def record_id(counter: int, slot: int) -> int:
    """The id of the record given counter value ``counter`` in ``slot``."""
    if not 0 <= slot < SLOTS:
        raise ValueError(f"no slot {slot}")
    if not 0 <= counter <= MAX_COUNTER:
        raise ValueError(f"counter {counter} out of range")
    return counter << SLOT_BITS | slot


def counter_of(record: int) -> int:
    """The counter value in a (cluster) record id."""
    return record >> SLOT_BITS


def slot_of(record: int) -> int:
    """The slot a (cluster) record id was given in."""
    return record & (SLOTS - 1)


def clock(now_ms: int) -> int:
    """The counter value the clock stands at: 256 per ms since EPOCH_MS."""
    return (now_ms - EPOCH_MS) * STEPS_PER_MS


class Ids:
    """How one partition's counter values become record ids: ``id(l)`` and the step between
    consecutive records' ids (1 on one Redis, 2^14 on a cluster)."""

    __slots__ = ("slot", "step")

    def __init__(self, slot: int | None) -> None:
        self.slot = slot  # None: a single Redis, ids are the counter values
        self.step = 1 if slot is None else 1 << SLOT_BITS

    def id(self, counter: int) -> int:
        return counter if self.slot is None else record_id(counter, self.slot)
