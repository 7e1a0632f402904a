"""Losing Redis (or any server) for a while: one log line when it goes, one when it is back.

Background loops (consumer-group expiry, notifications, the archiver) retry while a server
is away; logging every failed tick would bury the log in tracebacks. An ``Outage`` shared
by the loops of one process logs the first failure and the recovery, nothing in between.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kafkaesque.errors import HotTierUnavailable, describe_redis_error

# What Redis going away looks like to callers: redis-py's errors, or the core's own once
# the client translated them (kafkaesque.hot_tier).
REDIS_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    HotTierUnavailable,
)


class Outage:
    """Tracks whether a server is away; ``failed`` and ``recovered`` log only the changes."""

    def __init__(self, what: str, logger: logging.Logger) -> None:
        self.what = what
        self.logger = logger
        self.since: float | None = None  # monotonic time of the first failure

    def failed(self, exc: BaseException) -> None:
        if self.since is None:
            self.since = time.monotonic()
            if isinstance(exc, HotTierUnavailable):  # already says what and why
                reason = str(exc)
            else:
                reason = f"cannot reach {self.what}: {describe_redis_error(exc)}"
            self.logger.warning("%s; retrying until it is back", reason)

    def recovered(self) -> None:
        if self.since is not None:
            self.logger.warning(
                "%s available again after %.1f s", self.what, time.monotonic() - self.since
            )
            self.since = None


# The Redis of this process (a broker or a command uses one): its loops share one outage.
REDIS = Outage("Redis", logging.getLogger("kafkaesque.redis"))


@contextlib.contextmanager
def background_step(what: str, logger: logging.Logger) -> Iterator[None]:
    """One step of a background loop: Redis away is the shared outage (logged once, the
    next step retries), any other failure one traceback naming ``what``; the loop goes on
    either way."""
    try:
        yield
    except REDIS_CONNECTION_ERRORS as exc:
        REDIS.failed(exc)
    except Exception:
        logger.exception("%s failed", what)
    else:
        REDIS.recovered()
