"""Enforcing client quotas on one broker: Kafka's rates over sliding windows (KIP-13), the
throttle time that brings a rate back under its quota (KIP-219), and which entity's quota
applies to a client (Kafka's precedence of user / client-id / default entities).

``QuotaManager`` keeps this broker's copy of the quotas, re-read from Redis when their
version moves (polled once a second), and the rates of the clients it serves. With no
quota configured, ``QuotaManager.active`` is false and the server skips all of it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafkaesque.hot.outage import background_step
from kafkaesque.hot.quota_store import QuotaStore
from kafkaesque.security.quotas import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    IP,
    USER,
    Quotas,
    canonical_ip,
)

log = logging.getLogger(__name__)

WINDOW_SAMPLES = 11  # Kafka's quota.window.num
WINDOW_MS = 1000.0  # Kafka's quota.window.size.seconds, in ms
# Request and connection quotas throttle for at most one window, byte rates without bound.
MAX_BOUNDED_THROTTLE_MS = WINDOW_MS
SENSOR_EXPIRY_MS = 3600_000.0  # Kafka drops a client's sensors after an hour unused
REFRESH_SECONDS = 1.0


class Rate:
    """Kafka's Rate over a SampledStat: ``WINDOW_SAMPLES`` samples of ``WINDOW_MS`` each;
    the rate is the retained total over the time since the oldest sample began, counted
    as at least samples - 1 full windows (so a new client is not judged on one request)."""

    __slots__ = ("_current", "_starts", "_totals", "last_ms")

    def __init__(self) -> None:
        self._starts: list[float] = []
        self._totals: list[float] = []
        self._current = 0
        self.last_ms = 0.0

    def record(self, value: float, now_ms: float) -> None:
        self.last_ms = now_ms
        if not self._starts:
            self._starts.append(now_ms)
            self._totals.append(0.0)
        elif now_ms - self._starts[self._current] >= WINDOW_MS:
            self._current = (self._current + 1) % WINDOW_SAMPLES
            if self._current == len(self._starts):
                self._starts.append(now_ms)
                self._totals.append(0.0)
            else:
                self._starts[self._current] = now_ms
                self._totals[self._current] = 0.0
        self._totals[self._current] += value

    def measure(self, now_ms: float) -> tuple[float, float]:
        """(rate per second, the window in ms it was measured over)."""
        expiry = WINDOW_SAMPLES * WINDOW_MS
        for i, start in enumerate(self._starts):
            if now_ms - start >= expiry:  # obsolete: reset, as Kafka's purge does
                self._starts[i] = now_ms
                self._totals[i] = 0.0
        if not self._starts:
            return 0.0, WINDOW_MS * (WINDOW_SAMPLES - 1)
        elapsed = now_ms - min(self._starts)
        full = int(elapsed // WINDOW_MS)
        if full < WINDOW_SAMPLES - 1:
            elapsed += (WINDOW_SAMPLES - 1 - full) * WINDOW_MS
        window = max(elapsed, 1.0)
        return sum(self._totals) * 1000.0 / window, window

    def throttle_ms(self, bound: float, now_ms: float) -> int:
        """Kafka's QuotaUtils.throttleTime: how long until the rate is back at ``bound``,
        0 when it is not above it."""
        rate, window = self.measure(now_ms)
        if rate <= bound:
            return 0
        return math.floor((rate - bound) / bound * window + 0.5)  # Java's Math.round


# Kafka's precedence for user and client-id quotas (DefaultQuotaCallback): per level the
# user part and client-id part of the entity ("name": the client's own, None: the default,
# absent: not in the entity) and the rate's tags, which say who shares one rate: a
# user-level quota is shared by all that user's clients, a client-level one by all that
# client id's users, a default one is given to each user or client id on its own.
_NAME, _DEFAULT, _ABSENT = "name", None, "absent"
_LEVELS: tuple[tuple[str | None, str | None, bool, bool], ...] = (
    # user part, client-id part, tag user, tag client id
    (_NAME, _NAME, True, True),
    (_NAME, _DEFAULT, True, True),
    (_NAME, _ABSENT, True, False),
    (_DEFAULT, _NAME, True, True),
    (_DEFAULT, _DEFAULT, True, True),
    (_DEFAULT, _ABSENT, True, False),
    (_ABSENT, _NAME, False, True),
    (_ABSENT, _DEFAULT, False, True),
)

Tags = tuple[str, str]  # (user, client id) a rate is kept for; "" where it is not part


@dataclass(frozen=True, slots=True)
class Limit:
    """The quota that applies to a client for one key, and the rate it is measured on."""

    bound: float
    tags: Tags


class QuotaTable:
    """A snapshot of the quotas with Kafka's lookups; answers are cached per client."""

    def __init__(self, quotas: Quotas) -> None:
        self.quotas = quotas
        self.client_keys = frozenset(k for e, v in quotas.items() if e[0][0] != IP for k in v)
        self._ips: dict[str | None, float] = {}  # canonical ip (None: default) -> rate
        for entity, values in quotas.items():
            entity_type, name = entity[0]
            if entity_type == IP and CONNECTION_CREATION_RATE in values:
                ip = None if name is None else canonical_ip(name)
                self._ips[ip] = values[CONNECTION_CREATION_RATE]
        self._limits: dict[tuple[str, str, str], Limit | None] = {}

    def limit(self, key: str, user: str, client_id: str) -> Limit | None:
        """The quota on ``key`` for this user and client id, by Kafka's precedence."""
        if key not in self.client_keys:
            return None
        cached = (key, user, client_id)
        if cached in self._limits:
            return self._limits[cached]
        found = None
        for user_part, client_part, tag_user, tag_client in _LEVELS:
            pairs: list[tuple[str, str | None]] = []
            if client_part != _ABSENT:
                pairs.append((CLIENT_ID, client_id if client_part == _NAME else None))
            if user_part != _ABSENT:
                pairs.append((USER, user if user_part == _NAME else None))
            values = self.quotas.get(tuple(pairs))
            if values is not None and key in values:
                tags = (user if tag_user else "", client_id if tag_client else "")
                found = Limit(values[key], tags)
                break
        if len(self._limits) > 100_000:  # client ids are chosen by clients: stay bounded
            self._limits.clear()
        self._limits[cached] = found
        return found

    @property
    def ip_active(self) -> bool:
        return bool(self._ips)

    def connection_rate(self, ip: str) -> float | None:
        """The ip's connection_creation_rate: its own, else the default ip's."""
        rate = self._ips.get(ip)
        return self._ips.get(None) if rate is None else rate


class QuotaManager:
    """This broker's quotas and the rates of its clients."""

    def __init__(
        self,
        store: QuotaStore,
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self.table = QuotaTable({})
        self.active = False  # any user or client-id quota: the hot path's one check
        self._version: int | None = None
        self._rates: dict[tuple[str, str, str], Rate] = {}  # (key, *tags) -> rate
        self._ip_rates: dict[str, Rate] = {}
        self._changed = asyncio.Event()

    def now_ms(self) -> float:
        return self.clock() * 1000.0

    async def refresh(self) -> None:
        """Re-read the quotas if their version moved since the last read."""
        version = await self.store.version()
        if version == self._version:
            return
        quotas = await self.store.read()
        self.table = QuotaTable(quotas)
        self.active = bool(self.table.client_keys)
        self._version = version

    def changed(self) -> None:
        """This broker changed the quotas: re-read them now, not at the next poll."""
        self._changed.set()

    async def run(self) -> None:
        """Refresh every ``refresh_seconds`` (or at once after ``changed``) until cancelled;
        a Redis outage keeps the last quotas read."""
        while True:
            with background_step("reading the client quotas", log):
                await self.refresh()
            self._expire(self.now_ms())
            self._changed.clear()
            try:
                async with asyncio.timeout(self.refresh_seconds):
                    await self._changed.wait()
            except TimeoutError:
                pass

    def record(self, key: str, user: str, client_id: str, value: float) -> int:
        """Record ``value`` (bytes) for a client against its quota on ``key``; the throttle
        time in ms (0 when within the quota or when none applies)."""
        limit = self.table.limit(key, user, client_id)
        if limit is None:
            return 0
        name = (key, *limit.tags)
        rate = self._rates.get(name)
        if rate is None:
            rate = self._rates[name] = Rate()
        now = self.now_ms()
        rate.record(value, now)
        return rate.throttle_ms(limit.bound, now)

    def unrecord(self, key: str, user: str, client_id: str, value: float) -> None:
        """Take back a recorded value (a throttled fetch whose data is not sent)."""
        limit = self.table.limit(key, user, client_id)
        rate = None if limit is None else self._rates.get((key, *limit.tags))
        if rate is not None:
            rate.record(-value, self.now_ms())

    def max_in_window(self, key: str, user: str, client_id: str) -> float | None:
        """The most a quota allows in the measured window (Kafka caps fetches to it)."""
        limit = self.table.limit(key, user, client_id)
        if limit is None:
            return None
        return limit.bound * (WINDOW_SAMPLES - 1) * WINDOW_MS / 1000.0

    def connection_delay_ms(self, ip: str) -> int:
        """A new connection from ``ip``: 0 to accept it, else the ms to hold it before
        closing it (Kafka's delayed close); a refused connection is not counted."""
        bound = self.table.connection_rate(ip)
        if bound is None:
            return 0
        rate = self._ip_rates.get(ip)
        if rate is None:
            rate = self._ip_rates[ip] = Rate()
        now = self.now_ms()
        rate.record(1.0, now)
        delay = min(rate.throttle_ms(bound, now), int(MAX_BOUNDED_THROTTLE_MS))
        if delay:
            rate.record(-1.0, now)
        return delay

    def _expire(self, now_ms: float) -> None:
        # Both tables: rates by entity, and by client address.
        tables: tuple[dict[Any, Rate], ...] = (self._rates, self._ip_rates)
        for rates in tables:
            for name in [n for n, r in rates.items() if now_ms - r.last_ms > SENSOR_EXPIRY_MS]:
                del rates[name]
