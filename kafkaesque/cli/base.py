"""The command line's top-level group (``main``: the global options) and the shared
parts every command module takes from here: the context (context.py), how commands fail
(failures.py) and the shared option checks (options.py)."""

from __future__ import annotations

import logging
import os
import sys
import urllib.parse
from typing import Any

import click

from kafkaesque.cli.context import Context, pass_context
from kafkaesque.cli.failures import Commands, one_line_errors, run_async
from kafkaesque.cli.options import (
    group_id_option,
    home_option,
    key_values,
    option_group,
    pg_dsn_option,
    topic_argument,
    url_option,
)
from kafkaesque.cli.wire import bootstrap_option, wire_settings
from kafkaesque.hot.connect import SENTINEL_FORM, SENTINEL_SCHEME

# What the command modules take from here.
__all__ = [
    "Context",
    "group_id_option",
    "key_values",
    "main",
    "one_line_errors",
    "option_group",
    "pass_context",
    "pg_dsn_option",
    "run_async",
    "topic_argument",
]


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--redis-url",
    envvar="KAFKAESQUE_REDIS_URL",
    callback=url_option(
        "redis",
        "rediss",
        "unix",
        "redis+cluster",
        "rediss+cluster",
        SENTINEL_SCHEME,
        form="redis://host:port/db, rediss://..., unix:///path, redis+cluster://host:port,... "
        f"or {SENTINEL_FORM}",
    ),
    help="Redis to use (redis://host:port/db or unix:///path; a Redis Cluster: "
    "redis+cluster://host:port,host:port; the primary Sentinel names: "
    f"{SENTINEL_FORM}[?password=...&sentinel_password=...]). "
    "Default: a private Valkey server under the data directory.",
)
@click.option(
    "--home",
    envvar="KAFKAESQUE_HOME",
    type=click.Path(file_okay=False),
    callback=home_option,
    help="Data directory of the embedded servers (created by the commands that write, "
    "in an existing directory). Default: $XDG_DATA_HOME/kafkaesque, else "
    "~/.local/share/kafkaesque, wherever the command runs.",
)
@pg_dsn_option(
    help="PostgreSQL archive (postgresql://user:password@host:port/db). Default: the "
    "private PostgreSQL under the data directory (serve and archive start it; other "
    "commands use it once it exists).",
)
@click.option(
    "--redis-password-file",
    type=click.File("r"),
    help="A file holding the password of --redis-url (its first line), when the URL has "
    "none. Default: the REDIS_PASSWORD environment variable, if set.",
)
@click.option(
    "-b",
    "--bootstrap-server",
    envvar="KAFKAESQUE_BOOTSTRAP_SERVER",
    callback=bootstrap_option,
    metavar="HOST:PORT[,...]",
    help="Speak the Kafka protocol to these brokers instead of reaching Redis (the wire "
    "mode of produce, consume, topics, describe, create, delete, alter, delete-records, "
    "groups, group, users, acls).",
)
@click.option(
    "--command-config",
    type=click.Path(exists=True, dir_okay=False),
    help="With -b: the client's properties, key=value lines in librdkafka's names "
    "(security.protocol, sasl.mechanism, sasl.username, ssl.ca.location, ...).",
)
@click.option("-v", "--verbose", count=True, help="Log details to stderr (-v: INFO, -vv: DEBUG).")
@click.version_option(package_name="kafkaesque")
@click.pass_context
def main(
    ctx: click.Context,
    redis_url: str | None,
    home: str | None,
    pg_dsn: str | None,
    redis_password_file: Any,
    bootstrap_server: str | None,
    command_config: str | None,
    verbose: int,
) -> None:
    """A Kafka-compatible log service whose hot data lives in Redis."""
    levels = {0: logging.WARNING, 1: logging.INFO}
    logging.basicConfig(
        level=levels.get(verbose, logging.DEBUG),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    password = os.environ.get("REDIS_PASSWORD") or None
    if redis_password_file is not None:
        password = redis_password_file.readline().rstrip("\r\n")
    if redis_url is not None and urllib.parse.urlsplit(redis_url).password is not None:
        password = None  # the URL's own wins
    ctx.obj = Context(redis_url, home, pg_dsn, password)
    ctx.obj.wire = wire_settings(bootstrap_server, command_config, ctx.invoked_subcommand)
