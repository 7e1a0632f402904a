"""Client quotas from the command line: quotas set, quotas list, quotas delete (Kafka's
kafka-configs.sh --alter/--describe --entity-type users/clients/ips)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import click

from kafkaesque.cli.base import Context, main, pass_context, run_async
from kafkaesque.cli.output import JSON, echo_rows, format_option
from kafkaesque.hot.quota_store import QuotaStore
from kafkaesque.security.quotas import (
    CLIENT_ID,
    CLIENT_KEYS,
    IP,
    IP_KEYS,
    MATCH_DEFAULT,
    MATCH_EXACT,
    USER,
    Alteration,
    InvalidQuota,
    check_alteration,
    check_filter,
    describe,
    describe_entity,
)

QUOTA_KEYS = {**CLIENT_KEYS, **IP_KEYS}


def entity_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--user / --default-user, --client-id / --default-client-id, --ip / --default-ip."""
    for entity_type in reversed((USER, CLIENT_ID, IP)):
        fn = click.option(
            f"--default-{entity_type}",
            f"default_{entity_type.replace('-', '_')}",
            is_flag=True,
            help=f"The default {entity_type} entity (every {entity_type} without its own).",
        )(fn)
        fn = click.option(f"--{entity_type}", metavar="NAME", help=f"A {entity_type} entity.")(fn)
    return fn


def entity_pairs(options: dict[str, Any]) -> Iterator[tuple[str, str | None]]:
    """The (type, name) pairs the entity options name; a name and its default together
    are a usage error."""
    for entity_type in (USER, CLIENT_ID, IP):
        attribute = entity_type.replace("-", "_")
        name, default = options[attribute], options[f"default_{attribute}"]
        if name is not None and default:
            raise click.UsageError(
                f"--{entity_type} and --default-{entity_type} exclude each other"
            )
        if name is not None or default:
            yield entity_type, name


def quota_value_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for key, kind in reversed(QUOTA_KEYS.items()):
        fn = click.option(
            f"--{key.replace('_', '-')}",
            key,
            type=float,
            help=f"{key} ({kind.value}{', ip entities only' if key in IP_KEYS else ''}).",
        )(fn)
    return fn


def store(ctx: Context) -> QuotaStore:
    log = ctx.log(archive=False)
    return log.stores.quotas


def number(value: float) -> str:
    """1048576 rather than 1.04858e+06."""
    return str(int(value)) if value.is_integer() else repr(value)


def checked(make: Callable[[], Alteration]) -> Alteration:
    """Kafka's checks, failing the command with Kafka's message: a usage mistake (exit
    code 2), as the options named a bad entity, key or value."""
    try:
        return make()
    except InvalidQuota as exc:
        raise click.UsageError(str(exc)) from None


@main.group()
def quotas() -> None:
    """Client quotas: byte rates per user / client id, connection rates per ip."""


@quotas.command("set")
@entity_options
@quota_value_options
@pass_context
@run_async
async def set_quotas(ctx: Context, **options: Any) -> None:
    """Set quotas on an entity, e.g. --client-id app --producer-byte-rate 1048576."""
    values = {key: options.pop(key) for key in QUOTA_KEYS}
    ops = [(key, value, False) for key, value in values.items() if value is not None]
    if not ops:
        raise click.UsageError("give at least one quota, e.g. --producer-byte-rate 1048576")
    pairs = list(entity_pairs(options))
    alteration = checked(lambda: check_alteration(pairs, ops))
    await store(ctx).alter([alteration])
    changes = ", ".join(f"{key}={number(value)}" for key, value, _ in ops)
    click.echo(f"{describe_entity(alteration.entity)}: {changes}")


@quotas.command("delete")
@entity_options
@click.option(
    "--key",
    "keys",
    multiple=True,
    type=click.Choice(sorted(QUOTA_KEYS)),
    help="A quota to remove (repeatable); all of the entity's if none is given.",
)
@pass_context
@run_async
async def delete_quotas(ctx: Context, keys: tuple[str, ...], **options: Any) -> None:
    """Remove quotas from an entity."""
    pairs = list(entity_pairs(options))
    quotas = store(ctx)
    entity = checked(lambda: check_alteration(pairs, [])).entity
    held = (await quotas.read()).get(entity, {})
    gone = sorted(set(keys or held) & held.keys())
    if not gone:
        raise click.ClickException(f"{describe_entity(entity)} has no such quota")
    await quotas.alter([Alteration(entity, dict.fromkeys(gone))])
    click.echo(f"{describe_entity(entity)}: removed {', '.join(gone)}")


@quotas.command("list")
@entity_options
@click.option("--strict", is_flag=True, help="Only entities of exactly the given types.")
@format_option
@pass_context
@run_async
async def list_quotas(ctx: Context, strict: bool, output_format: str, **options: Any) -> None:
    """List quotas, of the entities matching the given ones (all without any)."""
    components = [
        (t, MATCH_DEFAULT if n is None else MATCH_EXACT, n) for t, n in entity_pairs(options)
    ]
    try:
        wanted = check_filter(components, strict)
    except InvalidQuota as exc:
        raise click.UsageError(str(exc)) from None
    found = describe(await store(ctx).read(), wanted)
    rows = [
        [describe_entity(entity), key, value if output_format == JSON else number(value)]
        for entity, values in found.items()
        for key, value in values.items()
    ]
    # on stderr: stdout stays a table, empty
    echo_rows(output_format, ["ENTITY", "QUOTA", "VALUE"], rows, empty="no quotas")
