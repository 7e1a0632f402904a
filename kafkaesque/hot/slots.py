"""Redis Cluster's hash slots as kafkaesque uses them (docs/scale-out.md 2.2).

A partition's keys all carry the hash tag ``{NAME:P}``, so a partition lives in exactly one
of the 16384 slots, ``slot_of(NAME, P)``: a pure function of its name that no resharding
changes. Each slot holding partitions has a hash of its own (``Keys.slot_hash``), its name
tagged with ``tag(slot)``: a fixed short string whose CRC16 falls in that slot, so the
hash is in the same slot as the slot's partitions and one script reaches both.
"""

from __future__ import annotations

import itertools
import string
from binascii import crc_hqx
from collections.abc import Iterator
from functools import cache

SLOTS = 16384
# The tags are the first strings of this alphabet, shortest first, that hash to each slot.
_ALPHABET = string.digits + string.ascii_lowercase


def hash_slot(tag: str) -> int:
    """The slot of a key whose hash tag is ``tag`` (CRC16/XMODEM mod 16384, as Redis)."""
    return crc_hqx(tag.encode(), 0) % SLOTS


def slot_of(topic: str, partition: int) -> int:
    """The slot holding the partition's keys (its tag ``{topic:partition}``)."""
    return hash_slot(f"{topic}:{partition}")


def _strings() -> Iterator[str]:
    """Every string over the alphabet: by length, then in alphabet order."""
    for length in itertools.count(1):
        for chars in itertools.product(_ALPHABET, repeat=length):
            yield "".join(chars)


@cache
def tags() -> tuple[str, ...]:
    """The tag of every slot, by slot: the first string of ``_strings`` hashing to it
    (built once: about 200,000 CRCs)."""
    found: dict[int, str] = {}
    for text in _strings():
        found.setdefault(hash_slot(text), text)
        if len(found) == SLOTS:
            return tuple(found[slot] for slot in range(SLOTS))
    raise AssertionError("unreachable")  # pragma: no cover


def tag(slot: int) -> str:
    """The hash tag (without braces) of the slot's own hash."""
    return tags()[slot]
