"""The ACL model and authorizer: Kafka's matching (literal, prefixed, wildcard name and
principal, hosts), deny over allow, implied operations, super users, allow-everyone,
filters, validation, and the store in Redis (fakeredis) with the version the brokers poll."""

from __future__ import annotations

import asyncio

import fakeredis
import pytest

from kafkaesque.errors import InvalidRequest
from kafkaesque.hot.acl_store import AclStore
from kafkaesque.security.acls import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    check_binding,
    check_filter,
)
from kafkaesque.security.authorizer import Authorizer

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"


def acl(
    name: str,
    op: Operation,
    perm: Permission = ALLOW,
    principal: str = ALICE,
    rtype: ResourceType = T,
    pattern: PatternType = LIT,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*bindings: AclBinding, **options: object) -> Authorizer:
    a = Authorizer(AclStore(fakeredis.FakeAsyncRedis()), **options)  # type: ignore[arg-type]
    a.load(bindings)
    return a


def may(a: Authorizer, op: Operation, name: str, principal: str = ALICE, rtype=T, host="10.0.0.1"):
    return a.authorize(principal, host, op, rtype, name)


def test_literal_names_match_only_themselves() -> None:
    a = authorizer(acl("orders", Operation.READ))
    assert may(a, Operation.READ, "orders")
    assert not may(a, Operation.READ, "orders2")
    assert not may(a, Operation.READ, "orders", principal=BOB)
    assert not may(a, Operation.WRITE, "orders")
    assert not may(a, Operation.READ, "orders", rtype=G)


def test_prefixed_and_wildcard_names() -> None:
    a = authorizer(acl("app-", Operation.WRITE, pattern=PRE), acl("*", Operation.READ))
    assert may(a, Operation.WRITE, "app-events")
    assert may(a, Operation.WRITE, "app-")
    assert not may(a, Operation.WRITE, "ap")
    assert may(a, Operation.READ, "anything")
    assert may(a, Operation.READ, "app-events")


def test_wildcard_principal_and_hosts() -> None:
    a = authorizer(
        acl("t", Operation.READ, principal="User:*"),
        acl("t", Operation.WRITE, host="10.0.0.1"),
    )
    assert may(a, Operation.READ, "t", principal=BOB)
    assert may(a, Operation.WRITE, "t")
    assert not may(a, Operation.WRITE, "t", host="10.0.0.2")


def test_deny_wins_over_allow() -> None:
    a = authorizer(
        acl("*", Operation.ALL),
        acl("secret", Operation.READ, DENY),
        acl("x-", Operation.ALL, DENY, principal="User:*", pattern=PRE),
    )
    assert may(a, Operation.WRITE, "secret")
    assert not may(a, Operation.READ, "secret")
    assert not may(a, Operation.DESCRIBE, "x-1")
    assert may(a, Operation.DESCRIBE, "other")


def test_implied_operations() -> None:
    for op in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER):
        a = authorizer(acl("t", op))
        assert may(a, Operation.DESCRIBE, "t"), op
        assert not may(a, Operation.CREATE, "t"), op
    a = authorizer(acl("t", Operation.ALTER_CONFIGS))
    assert may(a, Operation.DESCRIBE_CONFIGS, "t")
    assert not may(a, Operation.DESCRIBE, "t")
    a = authorizer(acl("t", Operation.ALL))
    assert all(may(a, op, "t") for op in Operation if op > Operation.ALL)
    # A DENY READ does not deny DESCRIBE: only the operation itself (or ALL).
    a = authorizer(acl("t", Operation.DESCRIBE), acl("t", Operation.READ, DENY))
    assert may(a, Operation.DESCRIBE, "t") and not may(a, Operation.READ, "t")


def test_super_users_and_allow_everyone_if_no_acl_found() -> None:
    a = authorizer(acl("t", Operation.READ, DENY), super_users=["User:admin"])
    assert may(a, Operation.READ, "t", principal="User:admin")
    assert not may(a, Operation.WRITE, "other")  # no ACL: denied by default
    a = authorizer(acl("t", Operation.READ, principal=BOB), allow_if_no_acl=True)
    assert may(a, Operation.WRITE, "other")  # no ACL on "other"
    assert not may(a, Operation.READ, "t")  # "t" has ACLs, none for alice


def test_authorize_any_for_idempotent_producers() -> None:
    def any_write(*bindings: AclBinding) -> bool:
        return authorizer(*bindings).authorize_any(ALICE, "h", Operation.WRITE, T)

    assert not any_write()
    assert not any_write(acl("t", Operation.READ))
    assert any_write(acl("t", Operation.WRITE))
    assert any_write(acl("p-", Operation.ALL, pattern=PRE))
    assert not any_write(acl("t", Operation.WRITE), acl("t", Operation.WRITE, DENY))
    assert not any_write(acl("p-1", Operation.WRITE), acl("p-", Operation.WRITE, DENY, pattern=PRE))
    assert not any_write(acl("t", Operation.WRITE), acl("*", Operation.ALL, DENY))


def test_decisions_are_cached_until_the_bindings_change() -> None:
    a = authorizer(acl("t", Operation.READ))
    assert may(a, Operation.READ, "t")
    a.load([acl("t", Operation.READ, DENY)])
    assert not may(a, Operation.READ, "t")


def test_filters_match_as_kafka() -> None:
    lit, pre, star = (
        acl("app-x", Operation.READ),
        acl("app-", Operation.READ, pattern=PRE),
        acl("*", Operation.READ),
    )
    match = AclFilter(T, "app-x", PatternType.MATCH)
    assert [b for b in (lit, pre, star) if match.matches(b)] == [lit, pre, star]
    exact = AclFilter(name="app-", pattern_type=PatternType.ANY)
    assert [b for b in (lit, pre, star) if exact.matches(b)] == [pre]
    assert AclFilter(pattern_type=LIT).matches(lit) and not AclFilter(pattern_type=LIT).matches(pre)
    assert not AclFilter(G).matches(lit)
    assert AclFilter(principal=ALICE, operation=Operation.READ, permission=ALLOW).matches(lit)
    assert not AclFilter(principal=BOB).matches(lit)
    assert not AclFilter(permission=DENY).matches(lit)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(pattern_type=PatternType.ANY), "patternType ANY"),
        (dict(pattern_type=PatternType.MATCH), "patternType MATCH"),
        (dict(operation=Operation.ANY), "operation ANY"),
        (dict(operation=99), "operation UNKNOWN"),
        (dict(permission=Permission.ANY), "permissionType ANY"),
        (dict(resource_type=ResourceType.ANY), "resourceType ANY"),
        (dict(principal="alice"), "Invalid principal"),
        (dict(name=""), "empty"),
        (dict(resource_type=C, name="other"), "kafka-cluster"),
    ],
)
def test_bad_bindings_are_invalid_requests(changes: dict, message: str) -> None:
    fields = dict(
        resource_type=T,
        name="t",
        pattern_type=LIT,
        principal=ALICE,
        host="*",
        operation=Operation.READ,
        permission=ALLOW,
    )
    with pytest.raises(InvalidRequest, match=message):
        check_binding(**{**fields, **changes})


def test_filters_with_unknown_elements_are_invalid() -> None:
    with pytest.raises(InvalidRequest, match="UNKNOWN"):
        check_filter(T, None, 0, None, None, Operation.ANY, Permission.ANY)
    with pytest.raises(InvalidRequest, match="UNKNOWN"):
        check_filter(42, None, PatternType.ANY, None, None, Operation.ANY, Permission.ANY)
    assert check_filter(1, None, 1, None, None, 1, 1) == AclFilter()


def test_filter_principals_match_literally() -> None:
    """As Kafka: a filter's principal is any string, compared as it is (no TYPE:NAME
    check), so ``*`` is a valid filter that matches only bindings for ``*``."""
    star = check_filter(1, None, 1, "*", None, 1, 1)
    assert star == AclFilter(principal="*")
    assert not star.matches(acl("t", Operation.READ))
    assert AclFilter(principal="User:*").matches(acl("t", Operation.READ, principal="User:*"))
    assert not AclFilter(principal="User:*").matches(acl("t", Operation.READ))


def test_the_store_keeps_bindings_and_bumps_its_version() -> None:
    async def scenario() -> None:
        redis = fakeredis.FakeAsyncRedis()
        store = AclStore(redis)
        reader = Authorizer(AclStore(redis))
        await reader.refresh()
        assert not reader.authorize(ALICE, "h", Operation.READ, T, "t")
        one, two = acl("t", Operation.READ), acl("g", Operation.READ, rtype=G)
        await store.add([one, two, one])
        assert await store.version() == 1
        assert await store.read() == sorted([one, two])
        await reader.refresh()
        assert reader.authorize(ALICE, "h", Operation.READ, T, "t")
        removed = await store.remove([AclFilter(G), AclFilter(G), AclFilter(C)])
        assert removed == [[two], [two], []]
        assert await store.read() == [one]
        assert await store.version() == 2
        assert await store.remove([AclFilter(C)]) == [[]]
        assert await store.version() == 2  # nothing removed: no change to see

    asyncio.run(scenario())
