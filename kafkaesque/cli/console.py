"""`kafkaesque console`: the web console (kafkaesque/console/) on this data directory's or
--redis-url's store, read-only unless --admin."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import TYPE_CHECKING

import click

from kafkaesque.cli.base import Context, main, one_line_errors, pass_context
from kafkaesque.cli.serve import host_port
from kafkaesque.hot.log import Log

if TYPE_CHECKING:
    from storage_pg.tiered import Archive

DEFAULT_LISTEN = "127.0.0.1:8080"


def listen_option(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[str, int] | None:
    """HOST:PORT; a bare PORT listens on loopback."""
    if value is not None and value.isdigit():
        value = f"127.0.0.1:{value}"
    return host_port(ctx, param, value)


# The --admin flag of console and serve --console.
admin_option = click.option(
    "--admin",
    "console_admin",
    is_flag=True,
    help="Console: offer changes (create, edit and delete topics, produce, reset group "
    "offsets, users and ACLs); default read-only, no change endpoint answers.",
)


def archive_of(log: Log) -> Archive | None:
    """The archive the log is tiered over, if any (the console's Archive page reads it)."""
    from storage_pg.tiered import Archive

    return log.cold if isinstance(log.cold, Archive) else None


@main.command()
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    callback=listen_option,
    metavar="HOST:PORT",
    help="Where the console serves HTTP (port 0: any free one).",
)
@admin_option
@click.option(
    "--super-user",
    "super_users",
    multiple=True,
    metavar="PRINCIPAL",
    help="A principal (User:NAME) every ACL check lets through, as serve's (repeatable).",
)
@pass_context
def console(
    ctx: Context, listen: tuple[str, int], console_admin: bool, super_users: tuple[str, ...]
) -> None:
    """Serve the web console: topics, messages in Redis and the archive, groups and their
    lag, the archive, users and ACLs. With SASL users (`kafkaesque users`) it asks for a
    login and shows each user what its ACLs let it describe."""
    from kafkaesque.console.app import make_console, serve_console

    if logging.getLogger().level > logging.INFO:
        logging.getLogger().setLevel(logging.INFO)

    async def run() -> None:
        log = ctx.log()  # tiered over the archive, when there is one
        await log.stores.ping()
        await ctx.bind_archives()
        state = make_console(log, console_admin, super_users, archive_of(log))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        try:
            await serve_console(state, *listen, stop=stop, started=announce)
        finally:
            await ctx.aclose()
            await log.stores.close()

    with one_line_errors():
        asyncio.run(run())


def announce(address: str) -> None:
    """The address on stdout (scripts read it), flushed at once."""
    click.echo(f"console: {address}")
    sys.stdout.flush()
