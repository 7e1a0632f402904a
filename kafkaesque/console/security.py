"""The Security page: the SASL users (their SCRAM mechanisms; never a secret) and the
ACLs; in admin mode, users and ACLs added and removed, as ``kafkaesque users`` and
``kafkaesque acls`` do. Changing them needs ALTER on the cluster; seeing them DESCRIBE."""

from __future__ import annotations

import enum

from aiohttp import web

from kafkaesque.console.context import console, posted, render, require_cluster, session
from kafkaesque.console.html import (
    Raw,
    field,
    form,
    hidden,
    join,
    message,
    query,
    select,
    table,
    tag,
    user_password,
)
from kafkaesque.console.records import BadInput
from kafkaesque.hot.credentials import mechanism_named
from kafkaesque.security import acls
from kafkaesque.security.scram import DEFAULT_ITERATIONS, MECHANISMS, new_credential

OPERATIONS = [o for o in acls.Operation if o not in (acls.Operation.UNKNOWN, acls.Operation.ANY)]


async def security_page(request: web.Request) -> web.Response:
    state = console(request)
    require_cluster(request, acls.Operation.DESCRIBE)
    users = await state.log.stores.credentials.users()
    bindings = sorted(await state.log.stores.acls.read())
    csrf = session(request).csrf
    body: list[object] = []
    if "done" in request.query:
        body.append(message(request.query["done"], "ok"))
    user_rows = []
    for name, credentials in users.items():
        row: list[object] = [
            name,
            ", ".join(f"{c.mechanism.name} ({c.iterations:,} iterations)" for c in credentials),
        ]
        if state.admin:
            row.append(
                form(
                    "/security/users/delete", hidden("user", name), "Remove", csrf=csrf, danger=True
                )
            )
        user_rows.append(row)
    body += [
        tag("h2", "Users"),
        table(
            ["User", "Credentials"] + ([""] if state.admin else []),
            user_rows,
            empty="no SASL users: nobody logs in to this console",
        ),
    ]
    if state.admin:
        body.append(user_form(csrf))
    acl_rows = []
    for b in bindings:
        row = [
            b.principal,
            b.host,
            b.resource_type.name,
            b.pattern_type.name,
            b.name,
            b.operation.name,
            b.permission.name,
        ]
        if state.admin:
            row.append(
                form(
                    "/security/acls/delete",
                    join(hidden(k, v) for k, v in _fields(b).items()),
                    "Remove",
                    csrf=csrf,
                    danger=True,
                )
            )
        acl_rows.append(row)
    body += [
        tag("h2", "ACLs"),
        table(
            ["Principal", "Host", "Resource", "Pattern", "Name", "Operation", "Permission"]
            + ([""] if state.admin else []),
            acl_rows,
            empty="no ACLs",
            id="acls",
        ),
    ]
    if state.admin:
        body.append(acl_form(csrf))
    return render(request, "Security", join(body), "/security")


def _fields(binding: acls.AclBinding) -> dict[str, str]:
    return {
        "principal": binding.principal,
        "host": binding.host,
        "resource_type": binding.resource_type.name,
        "pattern_type": binding.pattern_type.name,
        "name": binding.name,
        "operation": binding.operation.name,
        "permission": binding.permission.name,
    }


def user_form(csrf: str) -> Raw:
    content = join(
        [
            user_password("new-password"),
            select("Mechanism", "mechanism", [(m, m) for m in MECHANISMS], "SCRAM-SHA-256"),
        ]
    )
    return form("/security/users", content, "Add or change user", csrf=csrf, id="add-user")


def acl_form(csrf: str) -> Raw:
    content = join(
        [
            field("Principal", "principal", "User:", required=True),
            field("Host", "host", "*"),
            select(
                "Resource",
                "resource_type",
                [(r.name, r.name) for r in acls.BINDABLE_TYPES],
                "TOPIC",
            ),
            select(
                "Pattern",
                "pattern_type",
                [("LITERAL", "LITERAL"), ("PREFIXED", "PREFIXED")],
                "LITERAL",
            ),
            field("Name", "name", "", required=True),
            select("Operation", "operation", [(o.name, o.name) for o in OPERATIONS], "READ"),
            select("Permission", "permission", [("ALLOW", "ALLOW"), ("DENY", "DENY")], "ALLOW"),
        ]
    )
    return form("/security/acls", content, "Add ACL", csrf=csrf, id="add-acl")


def _binding(data: dict[str, str]) -> acls.AclBinding:
    """The form's ACL, checked as Kafka's controller checks one (InvalidRequest)."""

    def member(kind: type[enum.IntEnum], name: str) -> int:
        try:
            return int(kind[data.get(name, "").upper()])
        except KeyError:
            raise BadInput(
                f"{name.replace('_', ' ')} {data.get(name, '')!r} is not one of Kafka's"
            ) from None

    return acls.check_binding(
        member(acls.ResourceType, "resource_type"),
        data.get("name", "").strip(),
        member(acls.PatternType, "pattern_type"),
        data.get("principal", "").strip(),
        data.get("host", "").strip(),
        member(acls.Operation, "operation"),
        member(acls.Permission, "permission"),
    )


async def add_user(request: web.Request) -> web.Response:
    require_cluster(request, acls.Operation.ALTER)
    data = dict(await posted(request))
    user = data.get("user", "").strip()
    credential = new_credential(
        mechanism_named(data.get("mechanism", "")), data.get("password", ""), DEFAULT_ITERATIONS
    )
    await console(request).log.stores.credentials.put(user, credential)
    raise web.HTTPSeeOther(
        query("/security", done=f"user {user} has a {credential.mechanism.name} credential")
    )


async def remove_user(request: web.Request) -> web.Response:
    require_cluster(request, acls.Operation.ALTER)
    user = (await posted(request)).get("user", "")
    store = console(request).log.stores.credentials
    for credential in await store.describe(user):  # CredentialNotFound for no such user
        await store.delete(user, credential.mechanism)
    raise web.HTTPSeeOther(query("/security", done=f"removed user {user}"))


async def add_acl(request: web.Request) -> web.Response:
    require_cluster(request, acls.Operation.ALTER)
    binding = _binding(dict(await posted(request)))
    await console(request).log.stores.acls.add([binding])
    raise web.HTTPSeeOther(query("/security", done=f"added {binding.describe()}"))


async def remove_acl(request: web.Request) -> web.Response:
    require_cluster(request, acls.Operation.ALTER)
    b = _binding(dict(await posted(request)))
    wanted = acls.AclFilter(
        b.resource_type, b.name, b.pattern_type, b.principal, b.host, b.operation, b.permission
    )
    removed = await console(request).log.stores.acls.remove([wanted])
    count = sum(len(r) for r in removed)
    raise web.HTTPSeeOther(query("/security", done=f"removed {count} ACL(s)"))
