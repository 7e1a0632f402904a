"""The wire mode's users and ACLs (users, acls): SCRAM credentials through
Describe/AlterUserScramCredentials, ACLs through Create/Describe/DeleteAcls, with
confluent-kafka's admin client. Loaded only in wire mode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from confluent_kafka.admin import AclBinding as KafkaAclBinding
from confluent_kafka.admin import AclBindingFilter as KafkaAclFilter
from confluent_kafka.admin import (
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from kafkaesque.cli.wire_client import TIMEOUT, WireClient
from kafkaesque.security import acls


class WireSecurity:
    """The user and ACL requests of one command, over its client."""

    def __init__(self, client: WireClient) -> None:
        self.client = client

    def users(self) -> list[list[object]]:
        """Every SCRAM credential: [user, mechanism, iterations], by user."""
        found = self.client.wait(
            self.client.admin.describe_user_scram_credentials(request_timeout=TIMEOUT)
        )
        return [
            [user, c.mechanism.name.replace("_", "-"), c.iterations]
            for user in sorted(found)
            for c in found[user].scram_credential_infos
        ]

    def user_mechanisms(self, user: str) -> list[str]:
        futures = self.client.admin.describe_user_scram_credentials([user], request_timeout=TIMEOUT)
        described = self.client.wait(cast(dict[str, Any], futures)[user])
        return [c.mechanism.name.replace("_", "-") for c in described.scram_credential_infos]

    def set_user(self, user: str, mechanism: str, iterations: int, password: str) -> None:
        info = ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], iterations)
        change = UserScramCredentialUpsertion(user, info, password.encode())
        self.client.wait(
            self.client.admin.alter_user_scram_credentials([change], request_timeout=TIMEOUT)[user]
        )

    def delete_user(self, user: str, mechanisms: Sequence[str]) -> None:
        changes: list[Any] = [
            UserScramCredentialDeletion(user, ScramMechanism[m.replace("-", "_")])
            for m in mechanisms
        ]
        futures = self.client.admin.alter_user_scram_credentials(changes, request_timeout=TIMEOUT)
        self.client.wait(futures[user])

    # -- ACLs --------------------------------------------------------------------------------

    def create_acls(self, bindings: Sequence[acls.AclBinding]) -> None:
        wanted = [_binding(b) for b in bindings]
        futures = self.client.admin.create_acls(wanted, request_timeout=TIMEOUT)
        for binding in wanted:
            self.client.wait(futures[binding])

    def describe_acls(self, filters: Sequence[acls.AclFilter]) -> set[acls.AclBinding]:
        """The bindings any of the filters matches (one DescribeAcls each)."""
        found: set[acls.AclBinding] = set()
        for f in filters:
            future = self.client.admin.describe_acls(_filter(f), request_timeout=TIMEOUT)
            found.update(_ours(b) for b in self.client.wait(future))
        return found

    def delete_acls(self, filters: Sequence[acls.AclFilter]) -> set[acls.AclBinding]:
        """Delete what the filters match; the bindings deleted."""
        wanted = [_filter(f) for f in filters]
        futures = self.client.admin.delete_acls(wanted, request_timeout=TIMEOUT)
        return {_ours(b) for f in wanted for b in self.client.wait(futures[f])}


def _binding(b: acls.AclBinding) -> Any:
    """Ours as the client's (the enums share Kafka's codes)."""
    return KafkaAclBinding(
        ResourceType(int(b.resource_type)),
        b.name,
        ResourcePatternType(int(b.pattern_type)),
        b.principal,
        b.host,
        AclOperation(int(b.operation)),
        AclPermissionType(int(b.permission)),
    )


def _filter(f: acls.AclFilter) -> Any:
    any_: Any = None  # a filter's None: any (the client's types say str)
    return KafkaAclFilter(
        ResourceType(int(f.resource_type)),
        any_ if f.name is None else f.name,
        ResourcePatternType(int(f.pattern_type)),
        any_ if f.principal is None else f.principal,
        any_ if f.host is None else f.host,
        AclOperation(int(f.operation)),
        AclPermissionType(int(f.permission)),
    )


def _ours(b: Any) -> acls.AclBinding:
    return acls.AclBinding(
        acls.ResourceType(b.restype.value),
        b.name,
        acls.PatternType(b.resource_pattern_type.value),
        b.principal,
        b.host,
        acls.Operation(b.operation.value),
        acls.Permission(b.permission_type.value),
    )
