"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kafkaesque.errors import DuplicateResource, KafkaesqueError, UnacceptableCredential
from kafkaesque.hot.credentials import (
    CredentialStore,
    check_distinct,
    check_user,
    duplicate,
    mechanism_of,
)
from kafkaesque.security.scram import Credential, Mechanism, check_iterations, from_salted
from wire.authorize import Operation, cluster_allowed
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol.codec import NO_THROTTLE, Request, build, ok_response

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from wire.protocol.kio_types import (
        AlterUserScramCredentialsRequest,
        AlterUserScramCredentialsResponse,
        DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse,
        ScramCredentialChange,
        ScramCredentialUpsertion,
    )


async def describe_user_scram_credentials(
    broker: Broker, request: Request[DescribeUserScramCredentialsRequest]
) -> DescribeUserScramCredentialsResponse:
    """The mechanisms and iterations of the users asked for (null or empty: all); DESCRIBE
    on the cluster, as Kafka checks."""
    schema = request.response_class
    result_class, info_class = request.response_entities(
        "DescribeUserScramCredentialsResult", "CredentialInfo"
    )
    store: CredentialStore = broker.credentials
    asked = [u.name for u in request.body.users or ()]
    if not cluster_allowed(broker, request, Operation.DESCRIBE):
        return _denied(schema, result_class, asked)
    found: dict[str, list[Credential] | KafkaesqueError] = {}
    if not asked:
        found.update(await store.users())
    twice = check_distinct(asked)
    for user in dict.fromkeys(asked):
        try:
            if user in twice:
                raise duplicate(user)
            found[user] = await store.describe(user)
        except KafkaesqueError as exc:
            found[user] = exc
    results = []
    infos: Sequence[Credential]
    message: str | None
    for user, outcome in found.items():
        if isinstance(outcome, KafkaesqueError):
            code, message, infos = error_code(outcome), str(outcome), ()
        else:
            code, message, infos = ErrorCode.none, None, outcome
        results.append(
            build(
                result_class,
                user=user,
                error_code=code,
                error_message=message,
                credential_infos=tuple(
                    build(info_class, mechanism=c.mechanism.kafka_id, iterations=c.iterations)
                    for c in infos
                ),
            )
        )
    return ok_response(schema, results=tuple(results))


def _denied(
    schema: type, result_class: type, asked: list[str]
) -> DescribeUserScramCredentialsResponse:
    """CLUSTER_AUTHORIZATION_FAILED for a principal without DESCRIBE on the cluster, in a
    result per user asked, as Kafka's DescribeUserScramCredentialsRequest.getErrorResponse
    gives it (with the user's name, which Kafka leaves empty). Kafka also sets the
    top-level code; librdkafka 2.16 aborts the process (munmap_chunk: invalid pointer) on
    any top-level error, so with users named it stays 0: every client then fails each
    user's describe with the error (Java's AdminClient reads either). Asked for all users
    there is no user to carry it: the top-level code alone, as Kafka answers."""
    code, message = ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
    results = tuple(
        build(result_class, user=user, error_code=code, error_message=message, credential_infos=())
        for user in asked
    )
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none if asked else code,
        error_message=None if asked else message,
        results=results,
    )


def _upsertion(change: ScramCredentialChange) -> TypeIs[ScramCredentialUpsertion]:
    """An upsertion carries a salted password; a deletion names only the mechanism."""
    return hasattr(change, "salted_password")


async def alter_user_scram_credentials(
    broker: Broker, request: Request[AlterUserScramCredentialsRequest]
) -> AlterUserScramCredentialsResponse:
    """Upsert and delete credentials, user by user: a user's changes are all refused when
    one is (a (user, mechanism) pair named twice, an unknown mechanism, too few or too
    many iterations, deleting what does not exist). ALTER on the cluster, or every user
    answers CLUSTER_AUTHORIZATION_FAILED."""
    result_class = request.response_entity("AlterUserScramCredentialsResult")
    store: CredentialStore = broker.credentials
    body = request.body
    changes: dict[str, list[ScramCredentialChange]] = defaultdict(list)
    every: tuple[ScramCredentialChange, ...] = (*body.deletions, *body.upsertions)
    for change in every:
        changes[change.name].append(change)
    results = []
    message: str | None
    if not cluster_allowed(broker, request, Operation.ALTER):
        code = ErrorCode.cluster_authorization_failed
        message = "Cluster authorization failed: ALTER on the cluster"
        results = [
            build(result_class, user=u, error_code=code, error_message=message) for u in changes
        ]
        changes.clear()
    for user, items in changes.items():
        try:
            check_user(user)
            pairs = [f"{c.mechanism}" for c in items]
            if check_distinct(pairs):
                raise DuplicateResource(
                    "A user credential cannot be altered twice in the same request"
                )
            planned: list[tuple[Mechanism, Credential | None]] = []
            credential: Credential | None
            for c in items:
                mechanism = mechanism_of(c.mechanism)
                if _upsertion(c):
                    check_iterations(c.iterations)
                    if not c.salt or not c.salted_password:
                        raise UnacceptableCredential("an empty salt or salted password")
                    credential = from_salted(mechanism, c.salted_password, c.salt, c.iterations)
                    planned.append((mechanism, credential))
                else:
                    planned.append((mechanism, None))
            for mechanism, credential in planned:  # deletions of missing ones refuse first
                if credential is None and await store.get(user, mechanism) is None:
                    await store.delete(user, mechanism)  # raises CredentialNotFound
            for mechanism, credential in planned:
                if credential is None:
                    await store.delete(user, mechanism)
                else:
                    await store.put(user, credential)
            code, message = ErrorCode.none, None
        except KafkaesqueError as exc:
            code, message = error_code(exc), str(exc)
        results.append(build(result_class, user=user, error_code=code, error_message=message))
    return build(request.response_class, throttle_time=NO_THROTTLE, results=tuple(results))
