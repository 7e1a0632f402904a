"""ACLs as Kafka has them: bindings and filters (their store in Redis:
kafkaesque/hot/acl_store.py; the authorizer that checks them: kafkaesque/security/authorizer.py).

A binding allows or denies one principal, from one host, one operation on the resources
its pattern matches: a LITERAL name (``*`` being every resource of the type) or a PREFIXED
one.

Bindings live in Redis (``Keys.acls``, ``Keys.acls_version`` bumped on every change), so
every broker on the Redis sees the same ones; each broker keeps them in memory and re-reads
them when the version moved (``Authorizer.run`` polls it), so a check never asks Redis.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kafkaesque.errors import InvalidRequest

WILDCARD = "*"  # a literal resource name or a host matching every one
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name


class ResourceType(enum.IntEnum):
    """Kafka's ResourceType codes (DELEGATION_TOKEN and USER: not used here)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters: any pattern type, the name as given
    MATCH = 2  # filters: every binding that would match the name
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


# The resource types bindings may name here (Kafka's DELEGATION_TOKEN and USER guard
# features kafkaesque does not have).
BINDABLE_TYPES = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL: who (principal, host) may or may not do what on which resources."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        """Does the pattern cover this resource (the authorizer's matching)?"""
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        return name.startswith(self.name)

    def describe(self) -> str:
        """Kafka's kafka-acls.sh wording, for people."""
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission.name}) on {self.resource_type.name}:"
            f"{self.pattern_type.name}:{self.name}"
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter: None and the ANY values match everything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, binding: AclBinding) -> bool:
        """Kafka's AclBindingFilter.matches."""
        if self.resource_type not in (ResourceType.ANY, binding.resource_type):
            return False
        pattern = self.pattern_type
        if pattern not in (PatternType.ANY, PatternType.MATCH, binding.pattern_type):
            return False
        if self.name is not None:
            if pattern in (PatternType.ANY, binding.pattern_type):
                if self.name != binding.name:
                    return False
            elif binding.pattern_type == PatternType.LITERAL:  # MATCH
                if binding.name not in (self.name, WILDCARD):
                    return False
            elif not self.name.startswith(binding.name):  # MATCH on a PREFIXED binding
                return False
        return (
            self.principal in (None, binding.principal)
            and self.host in (None, binding.host)
            and self.operation in (Operation.ANY, binding.operation)
            and self.permission in (Permission.ANY, binding.permission)
        )


def _member(enum_class: type[enum.IntEnum], code: int) -> enum.IntEnum:
    try:
        return enum_class(code)
    except ValueError:
        return enum_class(0)  # UNKNOWN, as Kafka reads a code it does not know


def parse_principal(principal: str) -> str:
    """``TYPE:NAME``, as Kafka's SecurityUtils.parseKafkaPrincipal wants it."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise InvalidRequest(f"Invalid principal {principal!r}: expected TYPE:NAME (User:alice)")
    return principal


def check_binding(
    resource_type: int,
    name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission: int,
) -> AclBinding:
    """A binding to create, checked as Kafka's controller does; InvalidRequest if bad."""
    rtype = _member(ResourceType, resource_type)
    pattern = _member(PatternType, pattern_type)
    op = _member(Operation, operation)
    perm = _member(Permission, permission)
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidRequest(f"Invalid patternType {pattern.name}")
    if op in (Operation.UNKNOWN, Operation.ANY):
        raise InvalidRequest(f"Invalid operation {op.name}")
    if perm in (Permission.UNKNOWN, Permission.ANY):
        raise InvalidRequest(f"Invalid permissionType {perm.name}")
    if rtype not in BINDABLE_TYPES:
        raise InvalidRequest(f"Invalid resourceType {rtype.name}")
    if not name:
        raise InvalidRequest("Resource name should not be empty")
    if rtype == ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise InvalidRequest(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not host:
        raise InvalidRequest("Invalid host: empty (use * for any host)")
    return AclBinding(rtype, name, pattern, parse_principal(principal), host, op, perm)  # type: ignore[arg-type]


def check_filter(
    resource_type: int,
    name: str | None,
    pattern_type: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission: int,
) -> AclFilter:
    """A filter, checked as Kafka's Describe/DeleteAclsRequest do: UNKNOWN elements are an
    invalid request. The principal and host are matched literally, as Kafka's
    AccessControlEntryFilter does, whatever their form (``*`` finds only bindings for the
    principal ``*``)."""
    rtype = _member(ResourceType, resource_type)
    pattern = _member(PatternType, pattern_type)
    op = _member(Operation, operation)
    perm = _member(Permission, permission)
    unknown = [e.__class__.__name__ for e in (rtype, pattern, op, perm) if e.name == "UNKNOWN"]
    if unknown:
        raise InvalidRequest(f"The filter contains UNKNOWN elements: {', '.join(unknown)}")
    return AclFilter(rtype, name, pattern, principal, host, op, perm)  # type: ignore[arg-type]
