"""The share-partition state (KIP-932) on a real redis-server: acquisition, acknowledgement,
release, lock expiry and the delivery limit, each one Lua script (kafkaesque/hot/share_store.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import random
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio

from kafkaesque.groups.share.config import ShareGroupConfig
from kafkaesque.hot.keys import Keys
from kafkaesque.hot.share_store import ShareStore

TP = ("orders", 0)
LOCK = 1_000
LIMIT = 3
MAX_LOCKS = 100
CONFIG = ShareGroupConfig(
    record_lock_duration_ms=LOCK, delivery_count_limit=LIMIT, max_record_locks=MAX_LOCKS
)
NO_RENEW = dataclasses.replace(CONFIG, renew_acknowledge=False)


def sync(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run the async test body in its own event loop."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def store(url: str) -> ShareStore:
    return ShareStore(redis.asyncio.Redis.from_url(url), Keys())


async def acquire(
    s: ShareStore,
    member: str,
    now: int,
    ranges: list[tuple[int, int, bool]],
    max_records: int = 500,
) -> list[tuple[int, int, int]]:
    return await s.acquire("g", TP, member, now, CONFIG, max_records, ranges)


async def prepare(s: ShareStore, now: int, log_end: int = 10) -> tuple[int, ...]:
    return tuple(await s.prepare("g", TP, now, CONFIG, 0, 0, log_end))


@sync
async def test_records_go_to_one_member_and_accepted_ones_end(redis_url: str) -> None:
    s = store(redis_url)
    assert (await prepare(s, 0))[:3] == (0, 0, 0)
    assert await acquire(s, "a", 0, [(0, 4, True), (5, 9, True)], max_records=3) == [(0, 4, 1)]
    # The next fetch reads from the end: 0-4 are acquired by a.
    assert (await prepare(s, 1))[:3] == (0, 5, 5)
    assert await acquire(s, "b", 1, [(0, 4, True), (5, 9, True)]) == [(5, 9, 1)]
    code, _, _ = await s.acknowledge("g", TP, "a", 2, CONFIG, [(0, 4, [1])])
    assert code == 0
    state = (await s.states("g", [TP]))[TP]
    assert (state.start, state.end, state.acquired) == (5, 10, 5)
    assert state.totals["accepted"] == 5


@sync
async def test_bad_acknowledgements_change_nothing(redis_url: str) -> None:
    s = store(redis_url)
    await prepare(s, 0)
    await acquire(s, "a", 0, [(0, 4, True)])
    before = await s.states("g", [TP], with_records=True)
    # Another member's records, an offset past the end, a bad type, a mixed batch one of
    # whose offsets is fine: refused whole.
    assert (await s.acknowledge("g", TP, "b", 1, CONFIG, [(0, 0, [1])]))[0] == 121
    assert (await s.acknowledge("g", TP, "a", 1, CONFIG, [(3, 7, [1])]))[0] == 42
    assert (await s.acknowledge("g", TP, "a", 1, CONFIG, [(0, 0, [9])]))[0] == 42
    assert (await s.acknowledge("g", TP, "a", 1, CONFIG, [(0, 1, [1, 1, 1])]))[0] == 42
    assert (await s.acknowledge("g", TP, "a", 1, NO_RENEW, [(0, 0, [4])]))[0] == 42
    assert await s.states("g", [TP], with_records=True) == before
    # Accepted once, the second acknowledgement of the same record is refused.
    assert (await s.acknowledge("g", TP, "a", 1, CONFIG, [(2, 2, [1])]))[0] == 0
    assert (await s.acknowledge("g", TP, "a", 1, CONFIG, [(2, 2, [1])]))[0] == 121


@sync
async def test_release_redelivers_until_the_delivery_limit(redis_url: str) -> None:
    s = store(redis_url)
    await prepare(s, 0)
    for delivery in range(1, LIMIT + 1):
        next_offset = (await prepare(s, delivery))[2]
        assert next_offset == 0
        last = 1 if delivery == 1 else 0  # 1 is accepted the first time
        assert await acquire(s, "a", delivery, [(0, 1, True)]) == [(0, last, delivery)]
        # Offset 0 released every time.
        types = [2, 1] if delivery == 1 else [2]
        assert (await s.acknowledge("g", TP, "a", delivery, CONFIG, [(0, last, types)]))[0] == 0
    # Delivered LIMIT times: archived, never delivered again; the start moves past it.
    state = (await s.states("g", [TP]))[TP]
    assert (state.start, state.end, state.available) == (2, 2, 0)
    assert state.totals["archived"] == 1
    assert await acquire(s, "a", 9, [(0, 1, True)]) == []


@sync
async def test_expired_locks_and_members_gone_release_records(redis_url: str) -> None:
    s = store(redis_url)
    await prepare(s, 0)
    await acquire(s, "a", 0, [(0, 2, True)])
    await acquire(s, "b", 0, [(3, 4, True)])
    # Not yet due: nothing to read but the end.
    assert (await prepare(s, LOCK - 1))[2:4] == (5, LOCK)
    # Renewed, 2 outlives the others' locks.
    assert (await s.acknowledge("g", TP, "a", 500, CONFIG, [(2, 2, [4])]))[0] == 0
    _, _, next_offset, deadline, acquired, available, _ = await prepare(s, LOCK)
    assert (next_offset, deadline, acquired, available) == (0, 500 + LOCK, 1, 4)
    # b's session closed: its records go back at once.
    assert await s.release("g", [TP], "a", CONFIG) == 1
    runs = await acquire(s, "c", LOCK + 1, [(0, 4, True)])
    assert runs == [(0, 4, 2)]
    # Acknowledging after the lock expired and another member took it: refused.
    assert (await s.acknowledge("g", TP, "b", LOCK + 2, CONFIG, [(3, 4, [1])]))[0] == 121


@sync
async def test_markers_and_aborted_records_are_never_acquired(redis_url: str) -> None:
    s = store(redis_url)
    await prepare(s, 0)
    assert await acquire(s, "a", 0, [(0, 1, True), (2, 3, False), (4, 4, False), (5, 5, True)]) == [
        (0, 1, 1),
        (5, 5, 1),
    ]
    assert (await s.acknowledge("g", TP, "a", 1, CONFIG, [(2, 2, [1])]))[0] == 121
    await s.acknowledge("g", TP, "a", 1, CONFIG, [(0, 1, [1]), (5, 5, [1])])
    state = (await s.states("g", [TP]))[TP]
    assert (state.start, state.end) == (6, 6)


@sync
async def test_in_flight_records_stop_at_the_lock_limit(redis_url: str) -> None:
    s = store(redis_url)
    await prepare(s, 0, log_end=1000)
    runs = await acquire(
        s, "a", 0, [(i * 10, i * 10 + 9, True) for i in range(20)], max_records=1000
    )
    assert runs == [(0, MAX_LOCKS - 1, 1)]
    assert (await prepare(s, 1, log_end=1000))[2] == -1  # nothing more may be acquired


@sync
async def test_record_limit_mode_splits_batches(redis_url: str) -> None:
    s = store(redis_url)
    await prepare(s, 0)
    runs = await s.acquire("g", TP, "a", 0, CONFIG, 3, [(0, 9, True)], strict=True)
    assert runs == [(0, 2, 1)]
    state = (await s.states("g", [TP]))[TP]
    assert (state.start, state.end, state.acquired) == (0, 3, 3)
    # Batch-optimized (the default): the whole batch, past max records.
    assert await acquire(s, "b", 0, [(3, 9, True)], max_records=1) == [(3, 9, 1)]


@sync
async def test_random_operations_agree_with_a_model(redis_url: str) -> None:
    """Random acquisitions, acknowledgements, releases and lock expiries by three members,
    checked against a plain model of KIP-932's states: never two holders of a record, a
    done record never again, delivery counts one more per acquisition, never past the
    limit, the start offset the first record not done."""
    rng = random.Random(932)
    s = store(redis_url)
    end = 60  # log end: batches of 4 records
    batches = [(i, min(i + 3, end - 1), True) for i in range(0, end, 4)]
    await s.prepare("g", TP, 0, CONFIG, 0, 0, end)
    held: dict[int, tuple[str, int, int]] = {}  # offset -> member, deliveries, deadline
    available: dict[int, int] = {}  # offset -> deliveries so far
    done: set[int] = set()
    fetched_to = 0
    now = 0
    for _ in range(300):
        now += rng.choice((0, 100, 400, 1200))
        member = rng.choice("abc")
        if rng.random() < 0.5:
            await s.prepare("g", TP, now, CONFIG, 0, 0, end)
            for o, (_, n, deadline) in list(held.items()):
                if deadline <= now:  # expired: back, or archived at the limit
                    del held[o]
                    if n >= LIMIT:
                        done.add(o)
                    else:
                        available[o] = n
            runs = await acquire(s, member, now, batches, max_records=rng.choice((1, 5, 50)))
            got = {o: n for f, last, n in runs for o in range(f, last + 1)}
            for o, n in got.items():
                assert o not in held and o not in done, o
                assert n == available.pop(o, 0) + 1 <= LIMIT
                held[o] = (member, n, now + LOCK)
                fetched_to = max(fetched_to, o + 1)
        else:
            mine = [o for o, (m, _, _) in held.items() if m == member]
            wrong = rng.random() < 0.2 or not mine
            o = rng.randrange(fetched_to) if wrong and fetched_to else (mine[0] if mine else 0)
            kind = rng.choice((1, 2, 3))
            code, _, _ = await s.acknowledge("g", TP, member, now, CONFIG, [(o, o, [kind])])
            ok = o in held and held[o][0] == member
            below_start = all(x in done for x in range(o + 1))  # done already: nothing to do
            expected = 0 if ok or below_start else 42 if o >= fetched_to else 121
            assert code == expected, (o, code)
            if ok:
                _, n, _ = held.pop(o)
                if kind == 2 and n < LIMIT:
                    available[o] = n
                else:
                    done.add(o)
        state = (await s.states("g", [TP]))[TP]
        first_open = min((o for o in range(fetched_to) if o not in done), default=fetched_to)
        assert state.start == first_open
        assert state.acquired == len(held)


@sync
async def test_a_member_id_is_matched_whole(redis_url: str) -> None:
    """Member ids are the clients' strings: "b" may not acknowledge what "a b" holds."""
    s = store(redis_url)
    await prepare(s, 0)
    assert await acquire(s, "a b", 0, [(0, 1, True)]) == [(0, 1, 1)]
    assert (await s.acknowledge("g", TP, "b", 1, CONFIG, [(0, 0, [1])]))[0] == 121
    assert (await s.acknowledge("g", TP, "a b", 1, CONFIG, [(0, 1, [1])]))[0] == 0
