"""Option and argument checks several commands share: a group id, KEY=VALUE configs, a
topic name, URLs (Redis, PostgreSQL), the data directory, --pg-dsn, number and choice
options (number_option, choice_option: their default shown in --help), and groups of
options applied as one decorator. Each checks its value when the command line is parsed, so a
mistake is a usage error (exit 2), not a traceback when the command connects."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from kafkaesque.cli.output import Command
from kafkaesque.config.topic_config import check_topic_name
from kafkaesque.errors import KafkaesqueError
from kafkaesque.hot.connect import SENTINEL_SCHEME, check_url, parse_sentinel_url
from kafkaesque.tables import plural


def group_id_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A consumer group id: any non-empty string, as Kafka (which answers an empty one
    with INVALID_GROUP_ID)."""
    if value == "":
        raise click.BadParameter("a group id must not be empty")
    return value


def key_values(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> dict[str, str]:
    """Repeated KEY=VALUE options (Kafka configs) as a dict; a key given twice is refused."""
    settings: dict[str, str] = {}
    for item in value:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}")
        if key.strip() in settings:
            raise click.BadParameter(f"{key.strip()} is given twice")
        settings[key.strip()] = text.strip()
    return settings


def checked_topic(name: str, param_hint: str | None = None) -> str:
    """A topic name Kafka allows, else a usage error (of the parameter being parsed, or
    ``param_hint``)."""
    try:
        check_topic_name(name)
    except KafkaesqueError as exc:
        raise click.BadParameter(str(exc), param_hint=param_hint) from None
    return name


def topic_argument(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The TOPIC argument, its name checked."""

    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        return checked_topic(value)

    return click.argument("topic", callback=check)(fn)


def check_partitions(topic: str, count: int, *wanted: int | None) -> None:
    """A usage error (--partition) for a partition the topic, of ``count``, does not have."""
    if any(p is not None and p >= count for p in wanted):
        raise click.BadParameter(
            f"topic {topic} has {plural(count, 'partition')}", param_hint="--partition"
        )


def url_option(*schemes: str, form: str) -> Callable[..., str | None]:
    """An option callback checking a URL's scheme and port now, so a typo is a usage
    error rather than a traceback when the command connects."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        if value.startswith(SENTINEL_SCHEME + "://") and SENTINEL_SCHEME in schemes:
            try:
                parse_sentinel_url(value)
            except ValueError as exc:  # its message never holds a password
                raise click.BadParameter(str(exc)) from None
            return value
        try:
            url = urllib.parse.urlsplit(value)  # ValueError: a broken [IPv6] host
            # several host:port pairs (libpq's failover form) are left to the driver
            port = None if "," in url.netloc else url.port  # ValueError: not a port number
            valid = url.scheme in schemes and port != 0
            if url.scheme in ("redis", "rediss", "unix"):
                check_url(value)  # ValueError: a bad db or option
        except ValueError:  # also a port that is not a number, or out of 0..65535
            valid = False
        if not valid:
            shown = re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", value)  # never echo a password
            raise click.BadParameter(f"expected {form}, got {shown!r}")
        return value

    return check


def home_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The data directory may be created, but only in a directory that exists: a typo in
    its parent is an error, not a new tree with a server running in it."""
    if value is not None:
        parent = Path(value).absolute().parent
        if not parent.is_dir():
            shown = click.format_filename(parent)
            what = "is not a directory" if parent.exists() else "does not exist"
            raise click.BadParameter(f"{shown} {what}; the data directory goes in an existing one")
    return value


# The check every --pg-dsn option (global, archive, spark) runs.
check_pg_dsn = url_option("postgresql", "postgres", form="postgresql://user:password@host:port/db")


def pg_dsn_option(help: str) -> Callable[[Command], Command]:
    """The --pg-dsn option (global, archive, spark): the archive's DSN, checked now, also
    from KAFKAESQUE_PG_DSN; ``help`` says what it defaults to there."""
    return click.option("--pg-dsn", envvar="KAFKAESQUE_PG_DSN", callback=check_pg_dsn, help=help)


def option_group(*decorators: Callable[[Command], Command]) -> Callable[[Command], Command]:
    """One decorator applying ``decorators`` (click options) as if stacked above the
    command in the order given: a group of options several commands take."""

    def apply(command: Command) -> Command:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return apply


def number_option(
    name: str, default: float, help: str | None = None, *, low: float = 0, high: float | None = None
) -> Callable[[Command], Command]:
    """A number option within ``low``..``high``, whole when ``default`` is an int; --help
    shows the default."""
    kind = click.IntRange if isinstance(default, int) else click.FloatRange
    return click.option(name, type=kind(low, high), default=default, show_default=True, help=help)


def choice_option(
    *decls: str,
    choices: Sequence[str],
    help: str | None = None,
    default: str | None = None,
    case_sensitive: bool = True,
) -> Callable[[Command], Command]:
    """An option taking one of ``choices``, by default the first; --help shows the default."""
    return click.option(
        *decls,
        type=click.Choice(choices, case_sensitive=case_sensitive),
        default=choices[0] if default is None else default,
        show_default=True,
        help=help,
    )
