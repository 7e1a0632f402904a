"""SCRAM users from the command line: users add, users list, users delete (Kafka's
kafka-configs.sh --alter --add-config 'SCRAM-SHA-512=[password=...]' --entity-type users).
The password never comes as an argument: a prompt, stdin, or an environment variable."""

from __future__ import annotations

import os
import sys

import click

from kafkaesque.cli.base import Context, main, pass_context, run_async
from kafkaesque.cli.options import choice_option, number_option
from kafkaesque.cli.output import echo_rows, format_option
from kafkaesque.cli.wire import wire_security
from kafkaesque.hot.credentials import CredentialStore, mechanism_named
from kafkaesque.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, new_credential

MECHANISM_CHOICE = click.Choice(sorted(MECHANISMS), case_sensitive=False)


def store(ctx: Context) -> CredentialStore:
    log = ctx.log(archive=False)
    return log.stores.credentials


def read_password(password_stdin: bool, password_env: str | None) -> str:
    if password_stdin and password_env:
        raise click.UsageError("--password-stdin and --password-env exclude each other")
    if password_env is not None:
        password = os.environ.get(password_env)
        if password is None:
            raise click.ClickException(f"the environment variable {password_env} is not set")
    elif password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif not sys.stdin.isatty():  # a prompt would echo, or read a script's input
        raise click.ClickException(
            "no terminal to ask for the password on: give --password-stdin or --password-env"
        )
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.ClickException("the password must not be empty")
    return password


@main.group()
def users() -> None:
    """SCRAM users: the credentials SASL clients authenticate with."""


@users.command("add")
@click.argument("name")
@choice_option(
    "--mechanism",
    choices=sorted(MECHANISMS),
    default="SCRAM-SHA-512",
    case_sensitive=False,
    help="The SCRAM mechanism (PLAIN clients are checked against either).",
)
@number_option("--iterations", DEFAULT_ITERATIONS, low=DEFAULT_ITERATIONS, high=MAX_ITERATIONS)
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin's first line.")
@click.option("--password-env", metavar="VAR", help="Take the password from this variable.")
@pass_context
@run_async
async def add_user(
    ctx: Context,
    name: str,
    mechanism: str,
    iterations: int,
    password_stdin: bool,
    password_env: str | None,
) -> None:
    """Add a user, or set a user's password (prompted for, twice, by default)."""
    if not name:
        raise click.BadParameter("a user name must not be empty", param_hint="NAME")
    password = read_password(password_stdin, password_env)
    scram = mechanism_named(mechanism)
    if ctx.wire is not None:
        wire_security(ctx.wire).set_user(name, scram.name, iterations, password)
        click.echo(f"user {name}: {scram.name} credential set ({iterations} iterations)")
        return
    await store(ctx).put(name, new_credential(scram, password, iterations))
    click.echo(f"user {name}: {scram.name} credential set ({iterations} iterations)")


@users.command("list")
@format_option
@pass_context
@run_async
async def list_users(ctx: Context, output_format: str) -> None:
    """The users and their mechanisms (never a secret)."""
    if ctx.wire is not None:
        rows = wire_security(ctx.wire).users()
    else:
        found = await store(ctx).users()
        rows = [
            [user, c.mechanism.name, c.iterations] for user, creds in found.items() for c in creds
        ]
    echo_rows(output_format, ["USER", "MECHANISM", "ITERATIONS"], rows, empty="no users")


@users.command("delete")
@click.argument("name")
@click.option(
    "--mechanism",
    type=MECHANISM_CHOICE,
    help="Delete only this mechanism's credential. Default: every one of the user's.",
)
@pass_context
@run_async
async def delete_user(ctx: Context, name: str, mechanism: str | None) -> None:
    """Delete a user's credentials: its connections fail their next re-authentication."""
    if ctx.wire is not None:
        security = wire_security(ctx.wire)
        if mechanism is not None:
            gone = [mechanism_named(mechanism).name]
        else:
            gone = security.user_mechanisms(name)
        security.delete_user(name, gone)
        click.echo(f"user {name}: deleted {', '.join(gone)}")
        return
    credentials = store(ctx)
    if mechanism is not None:
        await credentials.delete(name, mechanism_named(mechanism))
        gone = [mechanism_named(mechanism).name]
    else:
        held = await credentials.describe(name)  # CredentialNotFound: no such user
        gone = [c.mechanism.name for c in held]
        for c in held:
            await credentials.delete(name, c.mechanism)
    click.echo(f"user {name}: deleted {', '.join(gone)}")
