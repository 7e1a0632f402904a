"""The ACL tests again with authenticated principals: clients log in over SASL_SSL with
SCRAM-SHA-512 as User:alice, ACLs name User:alice, and what alice was granted is not
granted to another user (bob, over SASL_PLAINTEXT with SCRAM-SHA-256) or to an anonymous
PLAINTEXT client. The scenarios are tests/wire/test_acls.py's, run with these fixtures."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kafkaesque.security.acls import Operation, ResourceType
from tests.servers import RedisServer
from tests.wire import test_acls as scenarios
from tests.wire.certificates import make_certificates
from tests.wire.conftest import Broker
from tests.wire.secure import USERS, Secured, checked, start_with_users
from tests.wire.test_acls import (  # noqa: F401  (scenarios collected here)
    Identity,
    produce_error,
    test_acl_apis_with_confluent_admin,
    test_admin_topic_operations_need_their_acls,
    test_consuming_needs_read_on_the_group_and_the_topic,
    test_produce_needs_write_on_the_topic,
    test_transactions_need_write_on_the_transactional_id,
)

acls = scenarios.acls  # the fixture the scenarios use


def login(secured: Secured, listener: str, user: str) -> dict[str, str]:
    mechanism, password = USERS[user]
    config = {
        "bootstrap.servers": secured.address(listener),
        "security.protocol": listener,
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    if listener == "SASL_SSL":
        config["ssl.ca.location"] = secured.certs.ca
    return config


@pytest.fixture(scope="module")
def secured_acls(
    redis_server: RedisServer,
    broker_factory: Callable[..., Broker],
    tmp_path_factory: pytest.TempPathFactory,
) -> Secured:
    return start_with_users(
        redis_server.url,
        broker_factory,
        make_certificates(tmp_path_factory.mktemp("certs")),
        ("SASL_SSL", "SASL_PLAINTEXT"),
        "--authorizer",
        "acl",
        "--super-user",
        "User:admin",
    )


@pytest.fixture
def broker(secured_acls: Secured, request: pytest.FixtureRequest) -> Iterator[Broker]:
    yield from (s.broker for s in checked(secured_acls, request))


@pytest.fixture
def identity(secured_acls: Secured) -> Identity:
    return Identity(login(secured_acls, "SASL_SSL", "alice"), "User:alice", "User:alice")


def test_acls_for_one_user_grant_nothing_to_another(
    secured_acls: Secured, broker: Broker, identity: Identity, acls, topic_name
):
    topic = topic_name()
    broker.cli("create", topic)
    acls((Operation.WRITE, ResourceType.TOPIC, topic), grantee=identity.grantee)
    assert produce_error(broker, identity, topic) is None
    bob = Identity(login(secured_acls, "SASL_PLAINTEXT", "bob"), "User:bob", "User:bob")
    error = produce_error(broker, bob, topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    error = produce_error(broker, Identity(), topic)  # PLAINTEXT: User:ANONYMOUS
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Bob may see topics once granted DESCRIBE; alice's WRITE never showed them to him.
    admin = AdminClient(bob.config)
    assert topic not in admin.list_topics(timeout=10).topics
    acls((Operation.DESCRIBE, ResourceType.TOPIC, topic), grantee="User:bob")
    assert topic in admin.list_topics(timeout=10).topics


def test_scram_users_api_needs_alter_on_the_cluster(
    secured_acls: Secured, broker: Broker, identity: Identity, acls
):
    admin = AdminClient(identity.config)
    upsert = UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-secret"
    )
    acls((Operation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"), grantee=identity.grantee)
    [future] = admin.alter_user_scram_credentials([upsert]).values()
    with pytest.raises(Exception) as refused:
        future.result(timeout=20)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    acls((Operation.ALTER, ResourceType.CLUSTER, "kafka-cluster"), grantee=identity.grantee)
    [future] = admin.alter_user_scram_credentials([upsert]).values()
    assert future.result(timeout=20) is None
    producer = Producer(
        {
            **login(secured_acls, "SASL_PLAINTEXT", "bob"),
            "sasl.username": "carol",
            "sasl.password": "carol-secret",
        }
    )
    assert producer.list_topics(timeout=10) is not None  # carol logs in
