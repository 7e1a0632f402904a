"""The server-side assignors of the consumer group protocol (KIP-848): "uniform" and "range".

An assignor maps every member to the partitions it should own (the target assignment),
from the members' subscriptions and the subscribed topics' partition counts. Both are pure
and deterministic (members and partitions are visited sorted), so any broker computing the
target from the same group state gets the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kafkaesque.types import TopicPartition

Subscriptions = Mapping[str, frozenset[str]]  # member id -> subscribed topic names
Assignment = dict[str, set[TopicPartition]]  # member id -> partitions

Assignor = Callable[
    [Subscriptions, Mapping[str, int], Mapping[str, set[TopicPartition]]], Assignment
]


def uniform(
    subscriptions: Subscriptions,
    partitions: Mapping[str, int],
    previous: Mapping[str, set[TopicPartition]],
) -> Assignment:
    """Spread the partitions so member loads differ by at most one where subscriptions
    allow, moving as few partitions as possible from the ``previous`` target (sticky)."""
    out: Assignment = {m: set() for m in subscriptions}
    owner: dict[TopicPartition, str] = {}
    eligible: dict[TopicPartition, list[str]] = {}
    for topic, count in sorted(partitions.items()):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        for p in range(count):
            if members:
                eligible[topic, p] = members
    # Keep what members had, as long as they still subscribe and stay under the fair
    # share of a homogeneous group (heterogeneous loads are evened out below).
    share = -(-len(eligible) // max(len(subscriptions), 1))
    for member in sorted(previous):
        if member not in out:
            continue
        for tp in sorted(previous[member]):
            if tp in eligible and tp not in owner and member in eligible[tp]:
                if len(out[member]) < share:
                    owner[tp] = member
                    out[member].add(tp)
    for tp, members in sorted(eligible.items()):
        if tp not in owner:
            chosen = min(members, key=lambda m: (len(out[m]), m))
            owner[tp] = chosen
            out[chosen].add(tp)
    _balance(out, owner, eligible)
    return out


def _balance(
    out: Assignment, owner: dict[TopicPartition, str], eligible: dict[TopicPartition, list[str]]
) -> None:
    """Move partitions from the most to the least loaded member that may take them until
    no move makes the loads more even."""
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda tp: (-len(out[owner[tp]]), tp)):
            current = owner[tp]
            target = min(eligible[tp], key=lambda m: (len(out[m]), m))
            if len(out[current]) - len(out[target]) > 1:
                out[current].discard(tp)
                out[target].add(tp)
                owner[tp] = target
                moved = True
                break


def range_(
    subscriptions: Subscriptions,
    partitions: Mapping[str, int],
    previous: Mapping[str, set[TopicPartition]],
) -> Assignment:
    """Per topic, contiguous ranges over its subscribers sorted by member id (the first
    ``count % n`` get one more), so co-partitioned topics land together."""
    out: Assignment = {m: set() for m in subscriptions}
    for topic, count in sorted(partitions.items()):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        base, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = base + (1 if i < extra else 0)
            out[member].update((topic, p) for p in range(start, start + size))
            start += size
    return out


# Kafka's group.consumer.assignors: the first is the default.
ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
DEFAULT_ASSIGNOR = "uniform"
