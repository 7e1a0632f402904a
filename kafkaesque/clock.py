"""The wall clock in milliseconds, as Kafka's timestamps and Redis' scores count it."""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)
