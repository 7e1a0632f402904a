"""Logging what others cause without letting them flood the log: a kind of event is
logged in full a few times, then counted (``LogThrottle``), and a client's text in a line
is cut to a prefix (``clip``). Used by the wire front end for what clients send and by the
partition layer for the batches it refuses."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable

REPEAT_LOG_INTERVAL = 60.0  # seconds between lines counting a repeated warning or error

# Characters of a client's text (a user name, an error naming its bytes) in a log line:
# a 512 KiB user name must not make a 512 KiB line.
CLIENT_TEXT_SHOWN = 100
# Lines a client's doing may write per kind: a burst in full (an operator sees a few
# failed logins as they happen), then one more every CLIENT_REFILL_S; the rest counted.
CLIENT_BURST = 20
CLIENT_REFILL_S = 10.0


def clip(text: object, limit: int = CLIENT_TEXT_SHOWN) -> str:
    """``text`` as a string of at most about ``limit`` characters, saying how long it was."""
    shown = str(text)
    if len(shown) <= limit:
        return shown
    return f"{shown[:limit]}... ({len(shown)} characters)"


class _Kind:
    """What a LogThrottle knows of one kind of event."""

    __slots__ = ("allowance", "repeats", "since")

    def __init__(self, allowance: float, since: float) -> None:
        self.allowance = allowance  # lines it may still write in full
        self.repeats = 0  # counted, not written, in the current interval
        self.since = since  # the loop time the allowance was last topped up


class LogThrottle:
    """Logs the first occurrence of a kind of event in full (or a burst of them, for
    ``log``'s ``burst``), then one line per interval counting its repeats: a failure on
    every request must not write a traceback each, nor a client refused a thousand times a
    thousand lines. Every line a client's input causes goes through one, its text cut by
    ``clip``: CLIENT_BURST lines, then one per CLIENT_REFILL_S."""

    def __init__(self, logger: logging.Logger, interval: float = REPEAT_LOG_INTERVAL) -> None:
        self.logger = logger
        self.interval = interval
        self._kinds: dict[Hashable, _Kind] = {}  # key -> its state in the current interval

    def log(
        self,
        key: Hashable,
        level: int,
        summary: str,
        msg: str,
        *args: object,
        exc_info: BaseException | None = None,
        logger: logging.Logger | None = None,
        burst: int = 1,
        refill: float | None = None,
    ) -> None:
        """Log ``msg`` (to ``logger``, else the throttle's) if ``key`` has lines left: the
        first ``burst`` in full, then one per ``refill`` s (None: no more). Those not
        written are reported as "``summary``: N more in the last S s" at the interval's
        end; an interval without any ends the kind (the next is logged in full)."""
        now = asyncio.get_running_loop().time()
        kind = self._kinds.get(key)
        logger = logger or self.logger
        if kind is None:
            kind = self._kinds[key] = _Kind(burst, now)
            self._schedule(key, level, summary, logger)
        elif refill is not None:
            kind.allowance = min(burst, kind.allowance + (now - kind.since) / refill)
            kind.since = now
        if kind.allowance < 1:
            kind.repeats += 1
            return
        kind.allowance -= 1
        logger.log(level, msg, *args, exc_info=exc_info)

    def client(
        self,
        key: Hashable,
        level: int,
        summary: str,
        msg: str,
        *args: object,
        logger: logging.Logger,
    ) -> None:
        """``log`` for a line a client's input causes: CLIENT_BURST, then CLIENT_REFILL_S."""
        self.log(
            key,
            level,
            summary,
            msg,
            *args,
            logger=logger,
            burst=CLIENT_BURST,
            refill=CLIENT_REFILL_S,
        )

    def _schedule(self, key: Hashable, level: int, summary: str, logger: logging.Logger) -> None:
        asyncio.get_running_loop().call_later(
            self.interval, self._report, key, level, summary, logger
        )

    def _report(self, key: Hashable, level: int, summary: str, logger: logging.Logger) -> None:
        kind = self._kinds[key]
        if kind.repeats:  # still happening: count on; else the next one is logged in full
            logger.log(level, "%s: %d more in the last %g s", summary, kind.repeats, self.interval)
            kind.repeats = 0
            self._schedule(key, level, summary, logger)
        else:
            del self._kinds[key]
