"""`kafkaesque acls add/list/remove` through click's runner against a real redis-server,
with kafka-acls.sh's vocabulary; mistakes are one line on stderr and a non-zero exit."""

from __future__ import annotations

import asyncio

import redis.asyncio

from kafkaesque.hot.acl_store import AclStore
from kafkaesque.security.acls import Operation, PatternType, Permission, ResourceType
from tests.test_cli import ks, ok, one_line_error  # noqa: F401  (ks is a fixture)


def bindings(redis_url: str) -> list[tuple]:
    async def read() -> list[tuple]:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            return [
                (
                    b.resource_type,
                    b.name,
                    b.pattern_type,
                    b.principal,
                    b.host,
                    b.operation,
                    b.permission,
                )
                for b in await AclStore(client).read()
            ]
        finally:
            await client.aclose()

    return asyncio.run(read())


def test_add_list_remove(ks, redis_url: str) -> None:  # noqa: F811
    out = ok(
        ks(
            "acls",
            "add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--operation",
            "describe_configs",
            "--topic",
            "orders",
            "--group",
            "g",
        )
    ).stdout
    assert out.count("added ") == 4 and "operation=DESCRIBE_CONFIGS" in out
    ok(ks("acls", "add", "--deny-principal", "User:*", "--deny-host", "10.0.0.9", "--cluster"))
    ok(
        ks(
            "acls",
            "add",
            "--allow-principal",
            "User:bob",
            "--operation",
            "WRITE",
            "--topic",
            "app-",
            "--resource-pattern-type",
            "prefixed",
        )
    )
    T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
    LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
    assert sorted(bindings(redis_url)) == sorted(
        [
            (T, "orders", LIT, "User:alice", "*", Operation.READ, Permission.ALLOW),
            (T, "orders", LIT, "User:alice", "*", Operation.DESCRIBE_CONFIGS, Permission.ALLOW),
            (G, "g", LIT, "User:alice", "*", Operation.READ, Permission.ALLOW),
            (G, "g", LIT, "User:alice", "*", Operation.DESCRIBE_CONFIGS, Permission.ALLOW),
            (C, "kafka-cluster", LIT, "User:*", "10.0.0.9", Operation.ALL, Permission.DENY),
            (T, "app-", PRE, "User:bob", "*", Operation.WRITE, Permission.ALLOW),
        ]
    )
    listed = ok(ks("acls", "list")).stdout.splitlines()
    assert listed[0].split() == ["RESOURCE", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]
    assert len(listed) == 7
    assert "CLUSTER:LITERAL:kafka-cluster" in listed[1] or any("CLUSTER" in r for r in listed)
    # match: every ACL that applies to the topic app-events; any: the name as given.
    matching = ok(ks("acls", "list", "--topic", "app-events", "--resource-pattern-type", "match"))
    assert [r.split()[0] for r in matching.stdout.splitlines()[1:]] == ["TOPIC:PREFIXED:app-"]
    assert ok(ks("acls", "list", "--topic", "app-events")).stdout == ""
    only_alice = ok(ks("acls", "list", "--allow-principal", "User:alice", "--operation", "read"))
    assert len(only_alice.stdout.splitlines()) == 3
    gone = ok(ks("acls", "remove", "--topic", "orders", "--operation", "Read", "--force")).stdout
    assert gone.count("removed ") == 1
    ok(ks("acls", "remove", "--cluster", "--group", "g", "--force"))
    assert [b[1] for b in bindings(redis_url)] == ["app-", "orders"]
    # Without --force it asks; "n" keeps the ACLs.
    kept = ks("acls", "remove", "--topic", "app-", input=b"n\n")
    assert kept.exit_code == 1 and len(bindings(redis_url)) == 2
    ok(ks("acls", "remove", "--topic", "app-", input=b"y\n"))
    assert len(bindings(redis_url)) == 1
    one_line_error(ks("acls", "list", "--group", "nosuch"), 0, "no ACLs")


def test_mistakes_are_one_line_errors(ks, redis_url: str) -> None:  # noqa: F811
    add = ("acls", "add", "--allow-principal", "User:alice")
    one_line_error(ks(*add, "--operation", "Frobnicate", "--topic", "t"), 2, "unknown operation")
    one_line_error(ks(*add, "--operation", "Read"), 2, "give a resource")
    one_line_error(ks("acls", "add", "--operation", "Read", "--topic", "t"), 2, "give a principal")
    one_line_error(ks("acls", "add", "--allow-principal", "alice", "--topic", "t"), 2, "principal")
    one_line_error(ks(*add, "--topic", ""), 2, "empty")
    one_line_error(ks(*add, "--topic", "t", "--resource-pattern-type", "match"), 2, "match")
    one_line_error(ks("acls", "remove", "--force"), 2, "give a resource")
    one_line_error(ks("acls", "remove", "--topic", "t", "--force"), 1, "no ACL matches")
    assert bindings(redis_url) == []
