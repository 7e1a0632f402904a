"""The command line's shared parts: the click group, the context, error handling."""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import click
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from kafkaesque.embedded import EmbeddedError, EmbeddedRedis, default_home
from kafkaesque.groups import GroupCoordinator
from kafkaesque.log import Log, LogError, check_topic_name


class Context:
    """What every command needs: where Redis is, started on demand when embedded."""

    def __init__(self, redis_url: str | None, home: str | None) -> None:
        self.redis_url = redis_url
        self.home = default_home() if home is None else click.format_filename(home)

    def embedded(self) -> EmbeddedRedis:

        return EmbeddedRedis(Path(self.home))

    def url(self) -> str:
        return self.redis_url or self.embedded().ensure_started()

    def log(self) -> Log:
        return Log(redis.asyncio.Redis.from_url(self.url(), socket_connect_timeout=5))

    def groups(self, log: Log) -> GroupCoordinator:
        return GroupCoordinator(log.redis, namespace=log.ns)


def run_async(fn: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """Run an async command, turning expected failures into one line and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return asyncio.run(fn(*args, **kwargs))
        except LogError as exc:
            raise click.ClickException(str(exc)) from None
        except RedisConnectionError as exc:
            raise click.ClickException(f"cannot reach Redis: {exc}") from None
        except RedisError as exc:
            raise click.ClickException(f"Redis error: {exc}") from None
        except EmbeddedError as exc:
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            sys.exit(130)

    return wrapper


def topic_argument(fn: Callable[..., Any]) -> Callable[..., Any]:
    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        try:
            check_topic_name(value)
        except LogError as exc:
            raise click.BadParameter(str(exc)) from None
        return value

    return click.argument("topic", callback=check)(fn)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--redis-url",
    envvar="KAFKAESQUE_REDIS_URL",
    help="Redis to use (redis://host:port/db or unix:///path). "
    "Default: a private redis-server under the data directory.",
)
@click.option(
    "--home",
    envvar="KAFKAESQUE_HOME",
    type=click.Path(file_okay=False),
    help="Data directory of the embedded servers. Default: ./.kafkaesque",
)
@click.option("-v", "--verbose", is_flag=True, help="Log details to stderr.")
@click.version_option(package_name="kafkaesque")
@click.pass_context
def main(ctx: click.Context, redis_url: str | None, home: str | None, verbose: bool) -> None:
    """A Kafka-compatible log service whose hot data lives in Redis."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    ctx.obj = Context(redis_url, home)


pass_context = click.make_pass_decorator(Context)


def echo_table(headers: list[str], rows: list[list[object]]) -> None:
    """Print rows as left-aligned columns under their headers."""
    cells = [headers] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
