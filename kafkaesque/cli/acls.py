"""ACLs from the command line: acls add, acls list, acls remove (Kafka's kafka-acls.sh
--add/--list/--remove, with its options). They take effect on every broker started with
``serve --authorizer acl`` within its refresh interval (half a second)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from kafkaesque.cli.base import Context, main, option_group, pass_context, run_async
from kafkaesque.cli.options import choice_option
from kafkaesque.cli.output import echo_rows, format_option
from kafkaesque.cli.wire import wire_security
from kafkaesque.errors import InvalidRequest
from kafkaesque.hot.acl_store import AclStore
from kafkaesque.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    check_binding,
)

# A host given, or what stands for none: "*" (a binding's any host) or None (a filter's).
Host = TypeVar("Host", str, None)

# kafka-acls.sh spells operations Read, DescribeConfigs, ...; so do these, in any case,
# with or without underscores.
OPERATIONS = {
    op.name.replace("_", "").lower(): op
    for op in Operation
    if op
    not in (Operation.UNKNOWN, Operation.ANY, Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS)
}


def operation(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> list[Operation]:
    found: list[Operation] = []
    for value in values:
        op = OPERATIONS.get(value.replace("_", "").replace("-", "").lower())
        if op is None:
            names = ", ".join(o.name for o in OPERATIONS.values())
            raise click.BadParameter(f"unknown operation {value!r} (one of {names})")
        found.append(op)
    return found


resource_options = option_group(
    click.option("--topic", "topics", multiple=True, metavar="NAME", help="A topic (repeatable)."),
    click.option("--group", "groups", multiple=True, metavar="NAME", help="A consumer group."),
    click.option("--cluster", is_flag=True, help="The cluster."),
    click.option(
        "--transactional-id",
        "transactional_ids",
        multiple=True,
        metavar="ID",
        help="A transactional id.",
    ),
)


def resources(options: dict[str, Any]) -> list[tuple[ResourceType, str]]:
    found = [(ResourceType.TOPIC, t) for t in options["topics"]]
    found += [(ResourceType.GROUP, g) for g in options["groups"]]
    found += [(ResourceType.CLUSTER, CLUSTER_NAME)] if options["cluster"] else []
    found += [(ResourceType.TRANSACTIONAL_ID, i) for i in options["transactional_ids"]]
    return found


principal_options = option_group(
    click.option(
        "--allow-principal", multiple=True, metavar="PRINCIPAL", help="User:NAME to allow."
    ),
    click.option("--deny-principal", multiple=True, metavar="PRINCIPAL", help="User:NAME to deny."),
    click.option(
        "--allow-host", multiple=True, metavar="IP", help="Host of the allowed principals."
    ),
    click.option("--deny-host", multiple=True, metavar="IP", help="Host of the denied principals."),
    click.option(
        "--operation",
        "operations",
        multiple=True,
        callback=operation,
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        "AlterConfigs, IdempotentWrite or All (repeatable).",
    ),
)


def pattern_option(default: str) -> Callable[..., Any]:
    choices = (
        ["literal", "prefixed"] if default == "literal" else ["any", "match", "literal", "prefixed"]
    )
    return choice_option(
        "--resource-pattern-type",
        choices=choices,
        default=default,
        case_sensitive=False,
        help="literal names one resource (* every one), prefixed every name starting so; "
        "to find: any (the name as given) or match (every ACL that applies to the name).",
    )


def store(ctx: Context) -> AclStore:
    log = ctx.log(archive=False)
    return log.stores.acls


async def matching(ctx: Context, wanted: list[AclFilter]) -> set[AclBinding]:
    """The ACLs any of the filters matches: from the store, or DescribeAcls (-b)."""
    if ctx.wire is not None:
        return wire_security(ctx.wire).describe_acls(wanted)
    return {b for b in await store(ctx).read() if any(f.matches(b) for f in wanted)}


def show(binding: AclBinding) -> list[object]:
    return [
        f"{binding.resource_type.name}:{binding.pattern_type.name}:{binding.name}",
        binding.principal,
        binding.host,
        binding.operation.name,
        binding.permission.name,
    ]


@main.group()
def acls() -> None:
    """ACLs: who may do what, for brokers serving with --authorizer acl."""


@acls.command("add")
@resource_options
@principal_options
@pattern_option("literal")
@pass_context
@run_async
async def add_acls(ctx: Context, resource_pattern_type: str, **options: Any) -> None:
    """Allow (or deny) principals operations on resources, e.g. --allow-principal
    User:alice --operation Read --topic orders."""
    targets = resources(options)
    if not targets:
        raise click.UsageError("give a resource: --topic, --group, --cluster or --transactional-id")
    who = principals(options, "*")
    if not who:
        raise click.UsageError("give a principal: --allow-principal or --deny-principal User:NAME")
    pattern = PatternType[resource_pattern_type.upper()]
    try:  # a bad principal, host or name is a usage mistake (exit code 2)
        bindings = [
            check_binding(rtype, name, pattern, principal, host, op, permission)
            for rtype, name in targets
            for principal, permission, hosts in who
            for host in hosts
            for op in options["operations"] or [Operation.ALL]
        ]
    except InvalidRequest as exc:
        raise click.UsageError(str(exc)) from None
    if ctx.wire is not None:
        wire_security(ctx.wire).create_acls(bindings)
    else:
        await store(ctx).add(bindings)
    for binding in bindings:
        click.echo(f"added {binding.describe()}")


def principals(
    options: dict[str, Any], any_host: Host
) -> list[tuple[str, Permission, tuple[str | Host, ...]]]:
    """Each principal the options allow or deny, with its hosts (``any_host`` when none is
    given: "*" in a binding, None, any, in a filter)."""
    who = [
        (p, Permission.ALLOW, options["allow_host"] or (any_host,))
        for p in options["allow_principal"]
    ]
    who += [
        (p, Permission.DENY, options["deny_host"] or (any_host,)) for p in options["deny_principal"]
    ]
    return who


def filters(options: dict[str, Any], resource_pattern_type: str) -> list[AclFilter]:
    """The filters the options name: each resource (any without) by each principal (any
    without), host and operation."""
    pattern = PatternType[resource_pattern_type.upper()]
    targets: list[tuple[ResourceType, str | None]] = list(resources(options)) or [
        (ResourceType.ANY, None)
    ]
    who: list[tuple[str | None, Permission, tuple[str | None, ...]]] = list(
        principals(options, None)
    )
    if not who:
        who = [(None, Permission.ANY, (None,))]
    return [
        AclFilter(rtype, name, pattern, principal, host, op, permission)
        for rtype, name in targets
        for principal, permission, hosts in who
        for host in hosts
        for op in options["operations"] or [Operation.ANY]
    ]


@acls.command("list")
@resource_options
@principal_options
@pattern_option("any")
@format_option
@pass_context
@run_async
async def list_acls(
    ctx: Context, resource_pattern_type: str, output_format: str, **options: Any
) -> None:
    """List the ACLs of the given resources and principals (all without any)."""
    wanted = filters(options, resource_pattern_type)
    found = sorted(await matching(ctx, wanted))
    headers = ["RESOURCE", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]
    # on stderr: stdout stays a table, empty
    echo_rows(output_format, headers, [show(b) for b in found], empty="no ACLs")


@acls.command("remove")
@resource_options
@principal_options
@pattern_option("any")
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
@pass_context
@run_async
async def remove_acls(
    ctx: Context, resource_pattern_type: str, force: bool, **options: Any
) -> None:
    """Remove the ACLs of the given resources (and principals, hosts, operations)."""
    if not resources(options):
        raise click.UsageError("give a resource: --topic, --group, --cluster or --transactional-id")
    wanted = filters(options, resource_pattern_type)
    found = sorted(await matching(ctx, wanted))
    if not found:
        raise click.ClickException("no ACL matches")
    if not force:
        for binding in found:
            click.echo(binding.describe())
        click.confirm(f"Remove these {len(found)} ACLs?", abort=True)
    if ctx.wire is not None:
        removed = wire_security(ctx.wire).delete_acls(wanted)
    else:
        removed = {b for gone in await store(ctx).remove(wanted) for b in gone}
    for binding in sorted(removed):
        click.echo(f"removed {binding.describe()}")
