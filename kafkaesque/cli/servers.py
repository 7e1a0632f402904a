"""The embedded servers from the command line: stop."""

from __future__ import annotations

from pathlib import Path

import click

from kafkaesque.cli.base import Context, main, one_line_errors, pass_context
from kafkaesque.hot.embedded import in_use, server_name


@main.command()
@click.option("--force", is_flag=True, help="Stop them even while a broker uses them.")
@pass_context
def stop(ctx: Context, force: bool) -> None:
    """Stop the embedded servers of the data directory."""
    home = Path(ctx.home)
    with one_line_errors():
        empty = not home.is_dir() or not (
            ctx.embedded().exists() or ctx.embedded_postgres().initialised()
        )
    if empty:  # no store: nothing to stop, nor a lock file to leave in the directory
        click.echo("nothing was running", err=True)
        return
    if in_use(home) and not force:
        raise click.ClickException(
            f"a broker (kafkaesque serve) is using the servers of {click.format_filename(home)}: "
            "stop it first (they stop with it under scripts/run.sh), or use stop --force"
        )
    stopped = []
    with one_line_errors():
        if ctx.embedded_postgres().stop():
            stopped.append("PostgreSQL")
        if ctx.embedded().stop():
            stopped.append(server_name())
    click.echo(f"stopped {' and '.join(stopped)}" if stopped else "nothing was running", err=True)
