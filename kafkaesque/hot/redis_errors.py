"""Redis' failures and script error replies as the core's exceptions (kafkaesque/errors.py),
and redis-py's connection errors as one plain sentence. Only the hot store sees redis-py's
exceptions; everything above it sees these."""

from __future__ import annotations

import os
import re

from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kafkaesque.errors import (
    LUA_ERRORS,
    HotTierFull,
    HotTierUnavailable,
    KafkaesqueError,
    NotEnoughReplicas,
)


def from_lua(exc: ResponseError) -> Exception:
    """The core exception a script's error reply stands for; other replies (a Redis
    error such as OOM) are returned as they are."""
    name, _, message = str(exc).partition(" ")
    cls = LUA_ERRORS.get(name)
    return exc if cls is None else cls(message)


_CONNECT_ERROR = re.compile(
    r"Error (?P<errno>-?\d+) connecting to (?P<address>.+?)\. (?P<rest>.*?)\.?$"
)

# A connection dropped mid-reply: "Error while reading from 127.0.0.1:6379 : (104,
# 'Connection reset by peer')".
_READ_ERROR = re.compile(
    r"Error while (?:reading from|writing to) (?P<address>\S+) ?: "
    r"\((?P<errno>\d+), '(?P<reason>[^']*)'\)"
)

_SSL_SOURCE = re.compile(r" \(_ssl\.c:\d+\)$")  # where in CPython's _ssl.c it was raised


def describe_redis_error(exc: BaseException) -> str:
    """redis-py's connection error in one plain sentence: "Error 111 connecting to
    127.0.0.1:1. Connect call failed ('127.0.0.1', 1)." says where twice, and not why.
    (The message is all there is: redis-py's retries drop the OSError behind it.)"""
    text = str(exc) or type(exc).__name__
    match = _CONNECT_ERROR.match(text)
    if match is None:
        dropped = _READ_ERROR.match(text)
        if dropped is None:
            return text
        reason = dropped["reason"]
        return f"{dropped['address']} ({reason[:1].lower()}{reason[1:]})"
    errno = int(match["errno"])
    rest = match["rest"]
    if rest.startswith("[SSL"):  # rediss://: the number is the TLS library's, not an errno
        reason = _SSL_SOURCE.sub("", rest)
    else:
        reason = os.strerror(errno) if errno > 0 else rest  # < 0: a name lookup's
    return f"{match['address']} ({reason[:1].lower()}{reason[1:]})"


# redis-py drops the "OOM" code from OutOfMemoryError's message; inside a script, Redis 6
# wraps the reply ("ERR Error running script ... -OOM ...").
_OOM = re.compile(r"command not allowed when used memory")


def from_redis(exc: RedisError) -> KafkaesqueError | None:
    """The core exception for a Redis failure that says "not now" rather than "wrong
    request"; None for the others, which stay as they are."""
    text = str(exc)
    if isinstance(exc, BusyLoadingError):
        return HotTierUnavailable(f"Redis is loading its data: {text}")
    if isinstance(exc, AuthenticationError):  # before the connection error it is one of
        if "HELLO must be called" in text or "NOAUTH" in text:
            return HotTierUnavailable(
                "Redis wants a password (give it in the URL, --redis-password-file or "
                "REDIS_PASSWORD)"
            )
        return HotTierUnavailable(f"Redis refused the login: {text.rstrip('.')}")
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return HotTierUnavailable(f"cannot reach Redis: {describe_redis_error(exc)}")
    if not isinstance(exc, ResponseError):
        return None
    if isinstance(exc, OutOfMemoryError) or _OOM.search(text):
        return HotTierFull(f"Redis is full (maxmemory): {text}")
    if isinstance(exc, ReadOnlyError) or text.startswith(("READONLY", "MISCONF")):
        return HotTierUnavailable(f"Redis refuses writes: {text}")
    if text.startswith("NOREPLICAS"):
        return NotEnoughReplicas(f"Redis refuses writes: {text}")
    return None


def failure_message(exc: BaseException) -> str | None:
    """One line for people about a Redis failure that reached a command; None if ``exc``
    is not one."""
    if isinstance(exc, RedisConnectionError):
        return f"cannot reach Redis: {describe_redis_error(exc)}"
    if isinstance(exc, RedisError):
        return f"Redis error: {exc}"
    return None
