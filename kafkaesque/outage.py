"""Losing Redis (or any server) for a while: one log line when it goes, one when it is back.

Background loops (consumer-group expiry, notifications, the archiver) retry while a server
is away; logging every failed tick would bury the log in tracebacks. An ``Outage`` shared
by the loops of one process logs the first failure and the recovery, nothing in between.
"""

from __future__ import annotations

import logging
import os
import re
import time

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# What Redis going away looks like to redis-py's callers.
REDIS_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError)
_CONNECT_ERROR = re.compile(
    r"Error (?P<errno>-?\d+) connecting to (?P<address>.+?)\. (?P<rest>.*?)\.?$"
)


def describe_redis_error(exc: BaseException) -> str:
    """redis-py's connection error in one plain sentence: "Error 111 connecting to
    127.0.0.1:1. Connect call failed ('127.0.0.1', 1)." says where twice, and not why.
    (The message is all there is: redis-py's retries drop the OSError behind it.)"""
    text = str(exc) or type(exc).__name__
    match = _CONNECT_ERROR.match(text)
    if match is None:
        return text
    errno = int(match["errno"])
    reason = os.strerror(errno) if errno > 0 else match["rest"]  # < 0: a name lookup's
    return f"{match['address']} ({reason[:1].lower()}{reason[1:]})"


class Outage:
    """Tracks whether a server is away; ``failed`` and ``recovered`` log only the changes."""

    def __init__(self, what: str, logger: logging.Logger) -> None:
        self.what = what
        self.logger = logger
        self.since: float | None = None  # monotonic time of the first failure

    def failed(self, exc: BaseException) -> None:
        if self.since is None:
            self.since = time.monotonic()
            self.logger.warning(
                "%s unreachable: %s; retrying until it is back",
                self.what,
                describe_redis_error(exc),
            )

    def recovered(self) -> None:
        if self.since is not None:
            self.logger.warning(
                "%s reachable again after %.1f s", self.what, time.monotonic() - self.since
            )
            self.since = None


# The Redis of this process (a broker or a command uses one): its loops share one outage.
REDIS = Outage("Redis", logging.getLogger("kafkaesque.redis"))
