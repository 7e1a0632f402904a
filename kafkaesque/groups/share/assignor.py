"""KIP-932's simple assignor, as Kafka 4.x balances it: per subscribed topic, with at
least as many partitions as members each partition goes to one member (round robin over
the members in id order); with more members than partitions each member gets one
partition, so every partition is shared by a fair number of members. Share groups need
no stickiness: records, not partitions, are what members hold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def assign(
    subscriptions: Mapping[str, Sequence[str]], partitions: Mapping[str, int]
) -> dict[str, list[tuple[str, int]]]:
    """member id -> its (topic, partition)s, from each member's subscribed topic names
    and each existing topic's partition count (topics missing from ``partitions`` are
    not assigned)."""
    target: dict[str, list[tuple[str, int]]] = {m: [] for m in subscriptions}
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        count = partitions.get(topic, 0)
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if count <= 0 or not members:
            continue
        if len(members) <= count:
            for p in range(count):
                target[members[p % len(members)]].append((topic, p))
        else:
            for i, member in enumerate(members):
                target[member].append((topic, i % count))
    return {m: sorted(tps) for m, tps in target.items()}
