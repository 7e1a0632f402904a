"""What a connection's sessionless fetches keep from one to the next.

Clients without fetch sessions (librdkafka) name every partition in every Fetch: 10,000
of them, of which a handful changed since the last answer. ``FetchMemo`` keeps, per topic
of the last request, its entries as sent and, per entry in the request's order, the
FetchRequest, the answer and its encoded entry. A request whose entries are the last
ones, rotated (librdkafka turns its list by one partition per fetch so none is always
last), but for a few is planned (``FetchMemo.plan``) by comparing bytes and rotating
lists, C loops both: only the changed entries are unpacked, and kafkaesque.partition.fetch_changed
reads only them and the partitions the ReadCache no longer vouches for. The answer keeps
the request's order, so no client has to match partitions by name.
"""

from __future__ import annotations

import uuid
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import compress, repeat
from operator import is_
from typing import cast

from kafkaesque.partition.read_types import Fetched, FetchRequest, settled
from kafkaesque.types import TopicPartition
from wire.protocol.fetch_request import FetchBody, FetchTopic, Layout

# Entries changed between two requests beyond which the request is read as a new one.
MOST_CHANGED = 64


def make_request(name: str, lay: Layout, raw: tuple[int, ...]) -> FetchRequest:
    """A partition entry as unpacked from the wire, as the partition layer asks it."""
    at_p, at_e, at_o, at_l, _, at_m = lay.at  # FetchPartition's field order
    return FetchRequest(
        name,
        raw[at_p],
        raw[at_o],
        raw[at_m],
        -1 if at_e < 0 else raw[at_e],
        -1 if at_l < 0 else raw[at_l],
    )


class TopicMemo:
    """A topic of the last request: its entries as sent and, per entry in order, the
    request, the answer and its encoded entry (b"" for one of several pieces: an answer
    with records, which is never reused). ``unsettled``: the partitions whose answer the
    ReadCache does not keep (records, an error...), answered anew every time."""

    __slots__ = (
        "_base",
        "_shift",
        "answers",
        "block",
        "name",
        "pieces",
        "requests",
        "topic_id",
        "unsettled",
    )

    def __init__(
        self,
        name: str,
        topic_id: uuid.UUID | None,
        block: bytes,
        requests: list[FetchRequest],
        answers: list[Fetched],
        pieces: list[bytes],
        unsettled: set[int],
    ) -> None:
        self.name, self.topic_id, self.block = name, topic_id, block
        self.requests, self.answers, self.pieces = requests, answers, pieces
        self.unsettled = unsettled
        # partition -> its position when the memo was made; each request since turned
        # the list by ``_shift`` more (kept so, rotations cost nothing per partition).
        self._base = {r.partition: i for i, r in enumerate(requests)}
        self._shift = 0

    @property
    def whole(self) -> bool:
        """No partition appears twice (then positions are found by partition)."""
        return len(self._base) == len(self.requests)

    def position(self, partition: int, shift: int = 0) -> int | None:
        """Where the partition is now, or after turning by ``shift`` more."""
        at = self._base.get(partition)
        return None if at is None else (at - self._shift - shift) % len(self.requests)


class Planned:
    """A topic of a planned request: the memo's lists turned as the request is, the
    changed entries' requests replaced (nothing of the memo changes until ``commit``)."""

    __slots__ = ("answers", "block", "changed", "memo", "pieces", "requests", "shift")

    def __init__(self, memo: TopicMemo, block: bytes, shift: int, changed: list[int]) -> None:
        self.memo, self.block, self.shift, self.changed = memo, block, shift, changed
        k = shift
        self.requests = memo.requests[k:] + memo.requests[:k]
        self.answers = memo.answers[k:] + memo.answers[:k]
        self.pieces = memo.pieces[k:] + memo.pieces[:k]

    def commit(self) -> None:
        m = self.memo
        m.block, m.requests, m.answers, m.pieces = (
            self.block,
            self.requests,
            self.answers,
            self.pieces,
        )
        m._shift = (m._shift + self.shift) % len(self.requests)


class Plan:
    """A request planned from the memo (kafkaesque.partition.fetch_changed.Asked): positions run
    over its topics in order."""

    def __init__(self, topics: list[Planned]) -> None:
        self.topics = topics
        self.starts = []
        start = 0
        for t in topics:
            self.starts.append(start)
            start += len(t.requests)
        self.by_name = {t.memo.name: i for i, t in enumerate(topics)}

    def changed(self) -> list[int]:
        """The positions of entries that changed and of partitions answered anew always."""
        found = []
        for start, t in zip(self.starts, self.topics, strict=True):
            found += [start + i for i in t.changed]
            for partition in t.memo.unsettled:
                at = t.memo.position(partition, t.shift)
                if at is not None:
                    found.append(start + at)
        return found

    def position(self, topic: str, partition: int) -> int | None:
        i = self.by_name.get(topic)
        if i is None:
            return None
        t = self.topics[i]
        at = t.memo.position(partition, t.shift)
        return None if at is None else self.starts[i] + at

    def positions(self, topic: str) -> Iterable[int]:
        i = self.by_name.get(topic)
        if i is None:
            return ()
        return range(self.starts[i], self.starts[i] + len(self.topics[i].requests))

    def _at(self, position: int) -> tuple[Planned, int]:
        i = bisect_right(self.starts, position) - 1
        return self.topics[i], position - self.starts[i]

    def request(self, position: int) -> FetchRequest:
        t, at = self._at(position)
        return t.requests[at]

    def last(self, position: int) -> Fetched:
        t, at = self._at(position)
        return t.answers[at]

    def answered(
        self, results: dict[TopicPartition, Fetched], committed: bool
    ) -> list[tuple[Planned, int, Fetched]]:
        """Take the new answers in (each topic's ``answers``; ``unsettled`` as they are);
        (topic, its position, answer) of each, for its entry to be encoded."""
        found = []
        for (topic, partition), fetched in results.items():
            t = self.topics[self.by_name[topic]]
            at = t.memo.position(partition, t.shift)
            assert at is not None  # only asked partitions are read
            t.answers[at] = fetched
            if settled(t.requests[at], fetched, committed):
                t.memo.unsettled.discard(partition)
            else:
                t.memo.unsettled.add(partition)
            found.append((t, at, fetched))
        return found


class FetchMemo:
    """A connection's memory of its sessionless fetches (of one Fetch version)."""

    def __init__(self, version: int) -> None:
        self.version = version
        # For a request read whole: per topic, the FetchRequest made of each partition
        # entry (the same object while the entry stays the same, which the ReadCache
        # recognises at once); per partition with nothing new, its answer and entry.
        self._requests: dict[str, dict[tuple[int, ...], FetchRequest]] = {}
        self.entries: dict[str, dict[int, tuple[Fetched, bytes]]] = {}
        # The last request's topics, in order, when it can be planned from; its isolation.
        self.topics: list[TopicMemo] | None = None
        self.committed = False

    def requests(self, name: str | None, topic: FetchTopic) -> list[FetchRequest]:
        """The topic's partitions as FetchRequests; those whose entry is as in the last
        request are the objects made then."""
        entries, lay = topic.entries, topic.layout
        key = name or ""  # an unknown topic's requests are never read
        kept = self._requests.setdefault(key, {})
        made = list(map(kept.get, entries))  # a C loop: most entries are as last time
        new = list(compress(range(len(made)), map(is_, made, repeat(None))))
        for i in new:
            made[i] = kept[entries[i]] = make_request(key, lay, entries[i])
        requests = cast("list[FetchRequest]", made)  # each None was replaced just above
        if len(kept) > 2 * len(entries):  # forget the entries of old offsets
            self._requests[key] = dict(zip(entries, requests, strict=True))
        if name is None:
            del self._requests[key]
        return requests

    def plan(self, names: Sequence[str | None], body: FetchBody) -> Plan | None:
        """The request as the last one turned, with its changed entries' requests; None
        if it is not (other topics, other partitions, many entries changed...)."""
        memos = self.topics
        committed = body.isolation_level == 1
        if memos is None or committed != self.committed or len(memos) != len(body.topics):
            return None
        planned = []
        for name, t, m in zip(names, body.topics, memos, strict=True):
            if name != m.name or t.topic_id != m.topic_id or t.block is None:
                return None
            size = t.layout.entry.size
            found = rotated(m.block, t.block, size)
            if found is None:
                return None
            shift, changed = found
            p = Planned(m, t.block, shift, changed)
            at_p = t.layout.partition
            for i in changed:
                raw = t.layout.entry.unpack_from(t.block, i * size)
                if raw[at_p] != p.requests[i].partition:
                    return None  # another partition in its place: a new assignment
                p.requests[i] = make_request(name, t.layout, raw)
            planned.append(p)
        return Plan(planned)

    def keep(
        self,
        names: Sequence[str | None],
        body: FetchBody,
        requests: Sequence[list[FetchRequest]],
        outcomes: Sequence[list[Fetched]],
        pieces: Sequence[list[bytes]] | None,
    ) -> None:
        """Remember a request answered whole (per topic: its requests, answers and
        encoded entries, b"" for one of several pieces), to plan the next from; None
        ``pieces``: not answered by entries (a tagged field), nothing kept."""
        self.topics = None
        self.committed = committed = body.isolation_level == 1
        if pieces is None or len(set(names)) != len(names):
            return
        memos = []
        for name, t, reqs, answers, encoded in zip(
            names, body.topics, requests, outcomes, pieces, strict=True
        ):
            if name is None or t.block is None:
                return
            unsettled = {
                r.partition
                for r, f in zip(reqs, answers, strict=True)
                if f.batches or f.error is not None or not settled(r, f, committed)
            }
            m = TopicMemo(name, t.topic_id, t.block, list(reqs), list(answers), encoded, unsettled)
            if not m.whole:
                return
            memos.append(m)
        self.topics = memos


def rotated(last: bytes, block: bytes, size: int) -> tuple[int, list[int]] | None:
    """(k, i's) when ``block`` is ``last``'s entries of ``size`` bytes from the k-th on,
    then those before it, but for the entries at the i's (at most MOST_CHANGED); None if
    it is not."""
    n = len(block) // size
    if len(last) != len(block) or not n:
        return None
    k = -1
    if last == block:
        return 0, []
    doubled = last + last
    for j in range(min(4, n)):  # the first entries may be the ones that changed
        probe = block[j * size : (j + 1) * size]
        pos = doubled.find(probe)
        while pos >= 0 and pos % size:
            pos = doubled.find(probe, pos + 1)
        if 0 <= pos < len(last):
            k = (pos // size - j) % n
            break
    if k < 0:
        return None
    turned = doubled[k * size : k * size + len(block)]
    changed: list[int] = []
    # Halves compared as bytes (memcmp), down to the entries that differ.
    spans = [(0, n)]
    while spans:
        lo, hi = spans.pop()
        if turned[lo * size : hi * size] == block[lo * size : hi * size]:
            continue
        if hi - lo == 1:
            changed.append(lo)
            if len(changed) > MOST_CHANGED:
                return None
            continue
        mid = (lo + hi) // 2
        spans += ((mid, hi), (lo, mid))
    return k, sorted(changed)
