"""Losing Redis (or any server) for a while: one log line when it goes, one when it is back.

Background loops (consumer-group expiry, notifications, the archiver) retry while a server
is away; logging every failed tick would bury the log in tracebacks. An ``Outage`` shared
by the loops of one process logs the first failure and the recovery, nothing in between.
A recovery counts once a success comes ``RECOVERY_HOLD`` seconds after the last failure:
with one node of a Redis Cluster away, the commands to the others succeed between the
failures, and each success must not end the outage for the next failure to start another.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kafkaesque.clock import SYSTEM, Clock
from kafkaesque.errors import HotTierUnavailable
from kafkaesque.hot.redis_errors import describe_redis_error

# What Redis going away looks like to callers: redis-py's errors, or the core's own once
# the client translated them (kafkaesque.hot.tier).
REDIS_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    HotTierUnavailable,
)
# Seconds without a failure before a success ends an outage (see the module's docstring).
RECOVERY_HOLD = 1.0


class Outage:
    """Tracks whether a server is away; ``failed`` and ``recovered`` log only the changes."""

    def __init__(self, what: str, logger: logging.Logger, clock: Clock = SYSTEM) -> None:
        self.what = what
        self.logger = logger
        self.clock = clock
        self.since: float | None = None  # monotonic time of the first failure
        self.last_failure = 0.0  # monotonic time of the latest failure in the outage
        self.broken = False  # a connection broke mid-reply: not reported until it recurs
        # Whether its users retry: false in a CLI command (its error says it; a "retrying"
        # line beside it would contradict it) and in a broker until it first reached Redis.
        self.retrying = True
        # Whether the server was stopped for good (a broker's embedded Valkey after
        # `kafkaesque stop --force`): then the broker stops, and says so, rather than wait.
        self.stopped: Callable[[], bool] = lambda: False

    def failed(self, exc: BaseException) -> None:
        if not self.retrying or self.stopped():
            self.logger.debug("cannot reach %s: %s", self.what, describe_redis_error(exc))
            return
        self.last_failure = self.clock.monotonic()
        if self.since is None:
            if _broke_mid_reply(exc) and not self.broken:
                # "Connection reset" says nothing of why; the next try connects again
                # and meets the reason (refused...), or succeeds: a one-off is no outage.
                self.broken = True
                return
            self.broken = False
            self.since = self.last_failure
            if isinstance(exc, HotTierUnavailable):  # already says what and why
                reason = str(exc)
            else:
                reason = f"cannot reach {self.what}: {describe_redis_error(exc)}"
            self.logger.warning("%s; retrying until it is back", reason)

    def recovered(self) -> None:
        self.broken = False
        if self.since is None:
            return
        now = self.clock.monotonic()
        if now - self.last_failure < RECOVERY_HOLD:
            return  # failures still come between the successes: the outage goes on
        self.logger.warning("%s available again after %.1f s", self.what, now - self.since)
        self.since = None


def _broke_mid_reply(exc: BaseException) -> bool:
    """redis-py's error for a connection that broke while a reply was read."""
    return isinstance(exc, RedisConnectionError) and str(exc).startswith("Error while reading")


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
