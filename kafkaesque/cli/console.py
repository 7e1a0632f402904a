"""`kafkaesque console`: the web console (kafkaesque/console/) on this data directory's or
--redis-url's store, read-only unless --admin."""

from __future__ import annotations

import asyncio
import logging
import signal

import click

from kafkaesque.cli.base import Context, main, one_line_errors, pass_context
from kafkaesque.cli.options import number_option
from kafkaesque.cli.serve import loopback_port

DEFAULT_LISTEN = "127.0.0.1:8080"


@main.command()
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    callback=loopback_port,
    metavar="HOST:PORT",
    help="Where the console serves HTTP (port 0: any free one).",
)
@click.option(
    "--admin",
    is_flag=True,
    help="Offer changes (create, edit and delete topics, produce, reset group offsets, "
    "users and ACLs); default read-only: no change endpoint answers.",
)
@click.option(
    "--super-user",
    "super_users",
    multiple=True,
    metavar="PRINCIPAL",
    help="A principal (User:NAME) every ACL check lets through, as serve's (repeatable).",
)
@click.option(
    "--spark-export",
    "spark_exports",
    multiple=True,
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="The output directory of a `kafkaesque spark export` (local; repeatable): the "
    "Archive page shows what it covered.",
)
@number_option(
    "--sample-interval",
    5.0,
    "Seconds between the samples of lag and rates behind the sparklines (120 kept).",
    low=0.5,
)
@pass_context
def console(
    ctx: Context,
    listen: tuple[str, int],
    admin: bool,
    super_users: tuple[str, ...],
    spark_exports: tuple[str, ...],
    sample_interval: float,
) -> None:
    """Serve the web console: topics, messages in Redis and the archive, groups and their
    lag, the archive, users and ACLs. With SASL users (`kafkaesque users`) it asks for a
    login and shows each user what its ACLs let it describe."""
    from kafkaesque.console.app import announce, archive_of, make_console, serve_console

    if logging.getLogger().level > logging.INFO:
        logging.getLogger().setLevel(logging.INFO)

    async def run() -> None:
        log = ctx.log()  # tiered over the archive, when there is one
        await log.stores.ping()
        await ctx.bind_archives()
        state = make_console(
            log,
            admin,
            super_users,
            archive_of(log),
            sample_seconds=sample_interval,
            spark_exports=spark_exports,
        )
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
