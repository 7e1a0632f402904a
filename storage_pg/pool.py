"""Connections to the archive: an asyncpg pool whose timestamptz codec works in integers.

asyncpg's default codec turns every timestamptz into a ``datetime`` and back, about a
microsecond per value each way; the archiver writes and the cold reader reads millions of
them. With ``format="tuple"`` asyncpg exchanges ``(microseconds since 2000-01-01 UTC,)``
instead, which we get from Kafka's millisecond timestamps with one multiplication. Every
pool the archive uses must therefore come from ``create_pool`` (or pass
``init=init_connection``); ``check_pool`` says so clearly when it does not.
"""

from __future__ import annotations

import datetime
import errno
import socket
from typing import Any

import asyncpg

PG_EPOCH_MS = 946_684_800_000  # 2000-01-01T00:00:00Z, PostgreSQL's timestamp epoch
# PostgreSQL's timestamptz range, in microseconds from its epoch (MIN_TIMESTAMP, END_TIMESTAMP)
_MIN_US = -211_813_488_000_000_000
_END_US = 9_223_371_331_200_000_000
_PG_EPOCH = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)


# Errors that mean "PostgreSQL is not reachable right now": retry later.
PG_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # connection refused, reset, ...
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,  # e.g. the connection was closed under a query
    asyncpg.CannotConnectNowError,  # starting up or shutting down
    asyncpg.AdminShutdownError,  # "terminating connection due to administrator command"
    # A connection lost in the middle of an operation can leave asyncpg's protocol state
    # behind ("cannot switch to state ...; another operation is in progress"); the pool
    # drops that connection, and the next attempt takes a new one.
    asyncpg.InternalClientError,
)


class ArchiveError(RuntimeError):
    """The archive cannot be used as configured; the message is meant for people."""


def describe_failure(exc: BaseException) -> str | None:
    """One line for people about an expected failure of the archive; None otherwise."""
    from storage_pg.embedded import EmbeddedPostgresError

    if isinstance(exc, ArchiveError | EmbeddedPostgresError):
        return str(exc)
    if isinstance(
        exc, asyncpg.InvalidAuthorizationSpecificationError | asyncpg.InvalidPasswordError
    ):
        return f"PostgreSQL refused the login: {exc}"
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return f"no such PostgreSQL database: {exc}"
    if isinstance(exc, OSError) and not _network_error(exc):
        return None  # a local file or pipe, not PostgreSQL
    if isinstance(exc, PG_CONNECTION_ERRORS):
        return f"cannot reach PostgreSQL: {exc or type(exc).__name__}"
    if isinstance(exc, asyncpg.PostgresError):
        return f"PostgreSQL error: {exc}"
    return None


def _network_error(exc: OSError) -> bool:
    """Whether an OSError is about a network connection (not a file or a pipe)."""
    if isinstance(exc, BrokenPipeError):
        return False
    return isinstance(exc, ConnectionError | TimeoutError | socket.gaierror) or exc.errno in (
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.EADDRNOTAVAIL,
        errno.ETIMEDOUT,
        None,  # asyncpg's own "connect call failed" errors may carry none
    )


def ms_to_pg(ms: int) -> tuple[int] | None:
    """A Kafka timestamp (ms since 1970) as the tuple codec's value; None (SQL NULL) when
    PostgreSQL cannot hold it (a garbage timestamp far outside years 4713 BC..294276 AD)."""
    us = (ms - PG_EPOCH_MS) * 1000
    return (us,) if _MIN_US <= us < _END_US else None


def pg_to_ms(value: tuple[int] | None) -> int:
    """The tuple codec's value as Kafka ms; -1 (no timestamp) for NULL."""
    return -1 if value is None else value[0] // 1000 + PG_EPOCH_MS


def pg_to_datetime(value: tuple[int] | None) -> datetime.datetime | None:
    if value is None:
        return None
    return _PG_EPOCH + datetime.timedelta(microseconds=value[0])


def _identity(value: Any) -> Any:
    return value


async def init_connection(conn: asyncpg.Connection) -> None:
    """Per-connection set-up: timestamptz as (microseconds,) tuples."""
    await conn.set_type_codec(
        "timestamptz",
        schema="pg_catalog",
        encoder=_identity,
        decoder=_identity,
        format="tuple",
    )


async def create_pool(
    dsn: str, *, min_size: int = 0, max_size: int = 4, **kwargs: Any
) -> asyncpg.Pool:
    """A pool for the archive. ``min_size=0`` connects lazily, so creating it succeeds while
    PostgreSQL is down (the archiver retries); extra arguments go to asyncpg.create_pool."""
    kwargs.setdefault("command_timeout", 120)
    return await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=init_connection, **kwargs
    )


async def check_pool(conn: asyncpg.Connection) -> None:
    """Raise ArchiveError unless the connection has the archive's timestamptz codec."""
    value = await conn.fetchval("SELECT '2000-01-01 00:00:00.000001+00'::timestamptz")
    if value != (1,):
        raise ArchiveError(
            "the archive's connection pool must be created by storage_pg.create_pool "
            "(or with init=storage_pg.init_connection)"
        )
