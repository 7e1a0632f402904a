"""ACL authorization over real sockets: a broker serving with --authorizer acl, real
clients (confluent-kafka, kafka-python, raw kio requests) allowed or refused per API.

Every client here is User:ANONYMOUS (the PLAINTEXT listener). The tests take an
``Identity`` (the client config and the principal it authenticates as) and grant ACLs to
``identity.grantee``: the principal itself or User:*; a SASL test can run them with its
own identity. ACLs are written into Redis (the CLI's way) and the test waits for the
broker's refresh.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (
    AclBinding as CkAclBinding,
)
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
)
from confluent_kafka.admin import (
    ResourceType as CkResourceType,
)
from kio.schema.errors import ErrorCode

from kafkaesque.hot.acl_store import AclStore
from kafkaesque.hot.keys import Keys
from kafkaesque.security.acls import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from kafkaesque.security.authorizer import Authorizer
from tests.kafka_client import Connection, metadata_request, request
from tests.servers import RedisServer
from tests.wire.conftest import Broker

BROKER_ARGS = ("--authorizer", "acl", "--super-user", "User:admin")
REFRESH = 2 * 0.5  # twice the broker's ACL refresh interval


@dataclass(frozen=True)
class Identity:
    """How a client connects, who the broker takes it for, and whom ACLs name for it."""

    config: dict[str, Any] = field(default_factory=dict)
    principal: str = "User:ANONYMOUS"
    grantee: str = "User:ANONYMOUS"


@pytest.fixture(
    params=[Identity(), Identity(grantee="User:*")], ids=["principal", "wildcard-principal"]
)
def identity(request: pytest.FixtureRequest) -> Identity:
    return request.param


@pytest.fixture
def acls(broker: Broker) -> Iterator[Callable[..., None]]:
    """acls((Operation, ResourceType, name[, PatternType[, Permission]]), ..., grantee=P):
    replace every ACL with these, and wait until the broker has them."""
    client = redis.Redis.from_url(broker.redis_url)
    keys = Keys()

    def replace(*specs: tuple, grantee: str) -> None:
        bindings = []
        for spec in specs:
            op, rtype, name, *rest = spec
            pattern = rest[0] if rest else PatternType.LITERAL
            permission = rest[1] if len(rest) > 1 else Permission.ALLOW
            bindings.append(AclBinding(rtype, name, pattern, grantee, "*", op, permission))

        async def write() -> None:
            r = redis.asyncio.Redis.from_url(broker.redis_url)
            try:
                await r.delete(keys.acls)
                store = AclStore(r)
                await store.add(bindings)
                await r.incr(keys.acls_version)
            finally:
                await r.aclose()

        asyncio.run(write())
        time.sleep(REFRESH)

    yield replace
    client.delete(keys.acls)
    client.incr(keys.acls_version)
    client.close()


def created(broker: Broker, *topics: str) -> None:
    for topic in topics:
        broker.cli("create", topic)


def produce_error(broker: Broker, identity: Identity, topic: str, **config: Any) -> Any:
    """The delivery error of one message (None when delivered), or the producer's fatal
    error (an idempotent producer refused its producer id)."""
    fatal: list[Any] = []
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000, **identity.config}
        | config
        | {"error_cb": lambda err: fatal.append(err) if err.fatal() else None}
    )
    outcome: list[Any] = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    try:
        producer.flush(20)
    except (KafkaException, SystemError):  # the fatal error, raised out of a callback
        pass
    finally:
        # After a fatal error the client is never freed: closed here, or its threads
        # would go on connecting to this module's broker after it stopped.
        producer.close()
    assert outcome or fatal, "no delivery report"
    return fatal[0] if fatal else outcome[0]


def test_produce_needs_write_on_the_topic(broker: Broker, identity: Identity, acls, topic_name):
    topic = topic_name()
    created(broker, topic)
    acls((Operation.DESCRIBE, ResourceType.TOPIC, topic), grantee=identity.grantee)
    error = produce_error(broker, identity, topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls((Operation.WRITE, ResourceType.TOPIC, topic), grantee=identity.grantee)
    assert produce_error(broker, identity, topic) is None
    # A DENY wins over the ALLOW of a prefix.
    acls(
        (Operation.WRITE, ResourceType.TOPIC, topic[:5], PatternType.PREFIXED),
        (Operation.WRITE, ResourceType.TOPIC, topic, PatternType.LITERAL, Permission.DENY),
        grantee=identity.grantee,
    )
    error = produce_error(broker, identity, topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_idempotent_producers_need_idempotent_write_or_write(
    broker: Broker, identity: Identity, acls, topic_name
):
    topic = topic_name()
    created(broker, topic)
    with Connection(broker.bootstrap) as conn:
        acls((Operation.DESCRIBE, ResourceType.TOPIC, topic), grantee=identity.grantee)
        answer = conn.request(request(22, 4, transactional_id=None, transaction_timeout=60000))
        assert answer.error_code == ErrorCode.cluster_authorization_failed
        assert answer.producer_id == -1
        error = produce_error(broker, identity, topic, **{"enable.idempotence": True})
        # librdkafka raises the fatal CLUSTER_AUTHORIZATION_FAILED and purges the message.
        assert error is not None and error.code() in (
            KafkaError.CLUSTER_AUTHORIZATION_FAILED,
            KafkaError._PURGE_QUEUE,
        )
        for grant in [
            (Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, "kafka-cluster"),
            (Operation.WRITE, ResourceType.TOPIC, "other-topic"),  # Kafka 2.8+: any topic
        ]:
            acls(grant, (Operation.WRITE, ResourceType.TOPIC, topic), grantee=identity.grantee)
            answer = conn.request(request(22, 4, transactional_id=None, transaction_timeout=60000))
            assert answer.error_code == ErrorCode.none and answer.producer_id >= 0
        assert produce_error(broker, identity, topic, **{"enable.idempotence": True}) is None


def test_consuming_needs_read_on_the_group_and_the_topic(
    broker: Broker, identity: Identity, acls, topic_name
):
    topic, group = topic_name(), topic_name("group")
    created(broker, topic)
    acls(
        (Operation.ALL, ResourceType.TOPIC, topic),
        (Operation.DESCRIBE, ResourceType.GROUP, group),  # FindCoordinator only
        grantee=identity.grantee,
    )
    assert produce_error(broker, identity, topic) is None
    config = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        **identity.config,
    }
    consumer = Consumer(config)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        code = None
        while time.monotonic() < deadline and code is None:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error():
                code = msg.error().code()
        assert code == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    acls(
        (Operation.READ, ResourceType.TOPIC, topic),
        (Operation.READ, ResourceType.GROUP, group),
        grantee=identity.grantee,
    )
    consumer = Consumer(config)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        got = None
        while time.monotonic() < deadline and got is None:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got = msg.value()
        assert got == b"v"
    finally:
        consumer.close()
    with Connection(broker.bootstrap) as conn:  # Fetch without READ on the topic
        acls((Operation.DESCRIBE, ResourceType.TOPIC, topic), grantee=identity.grantee)
        answer = conn.fetch(topic, 0, 0)
        assert answer.error_code == ErrorCode.topic_authorization_failed


def test_metadata_hides_topics_without_describe(
    broker: Broker, identity: Identity, acls, topic_name
):
    seen, hidden, absent = topic_name("seen"), topic_name("hidden"), topic_name("absent")
    created(broker, seen, hidden)
    acls((Operation.READ, ResourceType.TOPIC, seen), grantee=identity.grantee)  # implies DESCRIBE
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **identity.config})
    topics = admin.list_topics(timeout=10).topics
    assert seen in topics and hidden not in topics
    with Connection(broker.bootstrap) as conn:
        answer = conn.request(metadata_request([seen, hidden, absent], auto_create=True))
        codes = {t.name: t.error_code for t in answer.topics}
        assert codes == {
            seen: ErrorCode.none,
            hidden: ErrorCode.topic_authorization_failed,
            absent: ErrorCode.topic_authorization_failed,  # DESCRIBE, CREATE: neither
        }
        acls((Operation.ALL, ResourceType.TOPIC, absent), grantee=identity.grantee)
        answer = conn.request(metadata_request([absent], auto_create=True))
        assert answer.topics[0].error_code == ErrorCode.none  # auto-created with CREATE


def test_admin_topic_operations_need_their_acls(
    broker: Broker, identity: Identity, acls, topic_name
):
    topic, other = topic_name(), topic_name("other")
    created(broker, other)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **identity.config})

    def outcome(future: Any) -> int | None:
        try:
            future.result(timeout=20)
        except KafkaException as exc:
            return exc.args[0].code()
        return None

    acls((Operation.DESCRIBE, ResourceType.TOPIC, "*"), grantee=identity.grantee)
    [future] = admin.create_topics([NewTopic(topic, 1)]).values()
    assert outcome(future) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    [future] = admin.delete_topics([other]).values()
    assert outcome(future) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls(
        (Operation.CREATE, ResourceType.CLUSTER, "kafka-cluster"),
        (Operation.DELETE, ResourceType.TOPIC, other),
        grantee=identity.grantee,
    )
    [future] = admin.create_topics([NewTopic(topic, 1)]).values()
    assert outcome(future) is None
    [future] = admin.delete_topics([other]).values()
    assert outcome(future) is None


def test_acl_apis_with_confluent_admin(broker: Broker, identity: Identity, acls, topic_name):
    topic = topic_name()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **identity.config})
    binding = CkAclBinding(
        CkResourceType.TOPIC,
        topic,
        ResourcePatternType.PREFIXED,
        "User:carol",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    everything = AclBindingFilter(
        CkResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    acls((Operation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"), grantee=identity.grantee)
    [future] = admin.create_acls([binding]).values()
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=20)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    acls((Operation.ALTER, ResourceType.CLUSTER, "kafka-cluster"), grantee=identity.grantee)
    [future] = admin.create_acls([binding]).values()
    assert future.result(timeout=20) is None
    found = admin.describe_acls(everything).result(timeout=20)  # ALTER implies DESCRIBE
    assert binding in found and len(found) == 2
    applying = AclBindingFilter(
        CkResourceType.TOPIC,
        topic,
        ResourcePatternType.MATCH,  # the prefixed binding applies to the topic
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    [future] = admin.delete_acls([applying]).values()
    assert future.result(timeout=20) == [binding]
    assert binding not in admin.describe_acls(everything).result(timeout=20)


def test_acl_requests_are_checked(broker: Broker, identity: Identity, acls):
    acls((Operation.ALL, ResourceType.CLUSTER, "kafka-cluster"), grantee=identity.grantee)
    creation = dict(
        resource_type=2,
        resource_name="t",
        resource_pattern_type=3,
        principal="User:dave",
        host="*",
        operation=3,
        permission_type=3,
    )
    bad = [
        {**creation, "resource_pattern_type": 1},  # ANY: only in filters
        {**creation, "operation": 42},  # UNKNOWN
        {**creation, "principal": "dave"},
        {**creation, "resource_type": 1},
    ]
    with Connection(broker.bootstrap) as conn:
        answer = conn.request(request(30, 3, creations=[*bad, creation]))
        codes = [r.error_code for r in answer.results]
        assert codes == [ErrorCode.invalid_request] * 4 + [ErrorCode.none]
        answer = conn.request(
            request(
                29,
                3,
                resource_type_filter=2,
                resource_name_filter=None,
                pattern_type_filter=0,  # UNKNOWN
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            )
        )
        assert answer.error_code == ErrorCode.invalid_request
        answer = conn.request(  # a principal filter is matched literally, as Kafka's
            request(
                29,
                3,
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter="*",
                host_filter=None,
                operation=1,
                permission_type=1,
            )
        )
        assert answer.error_code == ErrorCode.none and answer.resources == ()
        answer = conn.request(
            request(
                31,
                3,
                filters=[
                    dict(
                        resource_type_filter=2,
                        resource_name_filter="t",
                        pattern_type_filter=3,
                        principal_filter=None,
                        host_filter=None,
                        operation=op,
                        permission_type=1,
                    )
                    for op in (0, 1)
                ],
            )
        )
        results = answer.filter_results
        assert [r.error_code for r in results] == [ErrorCode.invalid_request, ErrorCode.none]
        assert [a.principal for a in results[1].matching_acls] == ["User:dave"]


def test_kafka_python_admin_acls(broker: Broker, identity: Identity, acls, topic_name):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType

    acls((Operation.ALL, ResourceType.CLUSTER, "kafka-cluster"), grantee=identity.grantee)
    topic = topic_name()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        acl = ACL(
            "User:erin",
            "*",
            ACLOperation.WRITE,
            ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL),
        )
        result = admin.create_acls([acl])
        assert result["succeeded"] == [acl] and not result["failed"]
        wanted = ACLFilter(
            "User:erin",
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(KpResourceType.TOPIC, topic, ACLResourcePatternType.ANY),
        )
        found, error = admin.describe_acls(wanted)
        assert error.errno == 0 and [a.principal for a in found] == ["User:erin"]
        [(_, deleted, error)] = admin.delete_acls([wanted])
        assert error.errno == 0 and [a.principal for a in deleted] == ["User:erin"]
    finally:
        admin.close()


def test_without_an_authorizer_acl_apis_are_security_disabled(broker_factory) -> None:
    plain = broker_factory()
    with Connection(plain.bootstrap) as conn:
        answer = conn.request(
            request(
                29,
                3,
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            )
        )
        assert answer.error_code == ErrorCode.security_disabled
        creation = dict(
            resource_type=2,
            resource_name="t",
            resource_pattern_type=3,
            principal="User:x",
            host="*",
            operation=3,
            permission_type=3,
        )
        answer = conn.request(request(30, 3, creations=[creation]))
        assert answer.results[0].error_code == ErrorCode.security_disabled
        # ... and every request is allowed, as before.
        assert conn.request(metadata_request(None)).topics is not None


def test_the_authorizer_reads_what_the_cli_wrote(broker: Broker) -> None:
    """Cross-check of the store shared by the CLI and the brokers."""
    broker.cli(
        "acls", "add", "--allow-principal", "User:zed", "--operation", "Read", "--group", "z"
    )

    async def check() -> bool:
        r = redis.asyncio.Redis.from_url(broker.redis_url)
        try:
            a = Authorizer(AclStore(r))
            await a.refresh()
            return a.authorize("User:zed", "1.2.3.4", Operation.DESCRIBE, ResourceType.GROUP, "z")
        finally:
            await r.aclose()

    assert asyncio.run(check())
    broker.cli("acls", "remove", "--group", "z", "--force")


def test_transactions_need_write_on_the_transactional_id(
    broker: Broker, identity: Identity, acls, topic_name
):
    topic, txn_id = topic_name(), topic_name("txn")
    created(broker, topic)
    config = {"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id, **identity.config}
    acls(
        (Operation.WRITE, ResourceType.TOPIC, topic),
        (Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id),  # FindCoordinator only
        grantee=identity.grantee,
    )
    with pytest.raises(KafkaException) as refused:
        Producer(config).init_transactions(20)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with Connection(broker.bootstrap) as conn:  # EndTxn: the same check, before any state
        answer = conn.request(
            request(26, 3, transactional_id=txn_id, producer_id=1, producer_epoch=0, committed=True)
        )
        assert answer.error_code == ErrorCode.transactional_id_authorization_failed
    acls(
        (Operation.WRITE, ResourceType.TOPIC, topic),
        (Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id),
        grantee=identity.grantee,
    )
    producer = Producer(config)
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction")
    producer.commit_transaction(20)


def test_authorized_operations_are_what_the_acls_allow(
    broker: Broker, identity: Identity, acls, topic_name
):
    """DescribeTopics, DescribeGroups and DescribeCluster with
    include_authorized_operations answer the operations the principal may do (implied
    ones too), as Kafka's
    KafkaApis.authorizedOperations; a principal that may not DESCRIBE the cluster gets
    none of its operations."""
    topic = topic_name()
    group = f"g-{topic}"
    created(broker, topic)
    acls(
        (Operation.READ, ResourceType.TOPIC, topic),
        (Operation.ALTER_CONFIGS, ResourceType.TOPIC, topic),
        (Operation.READ, ResourceType.GROUP, group),
        grantee=identity.grantee,
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **identity.config})
    wanted = TopicCollection([topic])
    [future] = admin.describe_topics(wanted, include_authorized_operations=True).values()
    operations = {op.name for op in future.result(timeout=20).authorized_operations}
    # READ implies DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS.
    assert operations == {"READ", "DESCRIBE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS"}
    [future] = admin.describe_consumer_groups([group], include_authorized_operations=True).values()
    assert {op.name for op in future.result(timeout=20).authorized_operations} == {
        "READ",
        "DESCRIBE",
    }
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=20)
    assert not cluster.authorized_operations  # no DESCRIBE on the cluster: none told
    acls(
        (Operation.READ, ResourceType.TOPIC, topic),
        (Operation.ALTER, ResourceType.CLUSTER, "kafka-cluster"),
        grantee=identity.grantee,
    )
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=20)
    assert {op.name for op in cluster.authorized_operations} == {"ALTER", "DESCRIBE"}


def test_without_an_authorizer_every_supported_operation_is_authorized(broker_factory) -> None:
    broker = broker_factory()
    broker.cli("create", "everything")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [future] = admin.describe_topics(
        TopicCollection(["everything"]), include_authorized_operations=True
    ).values()
    operations = {op.name for op in future.result(timeout=20).authorized_operations}
    assert operations == {
        "READ",
        "WRITE",
        "CREATE",
        "DESCRIBE",
        "DELETE",
        "ALTER",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
    }
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=20)
    assert {op.name for op in cluster.authorized_operations} == {
        "CREATE",
        "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE",
        "ALTER",
        "DESCRIBE",
    }
    [future] = admin.describe_topics(TopicCollection(["everything"])).values()
    assert future.result(timeout=20).authorized_operations is None  # not asked


def test_acl_changes_while_redis_is_away_change_nothing_and_are_retried(tmp_path: Path) -> None:
    """Redis away: each valid creation and deletion answers KAFKA_STORAGE_ERROR (retried)
    on the same connection, an invalid one its own code; none of them was half applied."""
    redis_server = RedisServer(tmp_path / "redis", appendonly=True)
    broker = Broker(
        redis_server.url,
        tmp_path / "broker",
        ("--authorizer", "acl", "--super-user", "User:ANONYMOUS"),
    )
    creation = dict(
        resource_type=2,
        resource_name="t",
        resource_pattern_type=3,
        principal="User:kept",
        host="*",
        operation=3,
        permission_type=3,
    )
    wanted = dict(
        resource_type_filter=2,
        resource_name_filter="t",
        pattern_type_filter=3,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    describe = request(29, 3, **wanted)
    try:
        with Connection(broker.bootstrap) as conn:
            answer = conn.request(request(30, 3, creations=[creation]))
            assert [r.error_code for r in answer.results] == [ErrorCode.none]
            mark = broker.stderr_size()
            redis_server.stop()
            new = {**creation, "principal": "User:new"}
            bad = {**creation, "principal": "new"}
            answer = conn.request(request(30, 3, creations=[new, bad, new]))
            assert [r.error_code for r in answer.results] == [
                ErrorCode.kafka_storage_error,
                ErrorCode.invalid_request,
                ErrorCode.kafka_storage_error,
            ]
            assert all("Redis" in r.error_message for r in answer.results[::2]), answer
            answer = conn.request(request(31, 3, filters=[wanted, {**wanted, "operation": 0}]))
            results = answer.filter_results
            assert [r.error_code for r in results] == [
                ErrorCode.kafka_storage_error,
                ErrorCode.invalid_request,
            ]
            assert [r.matching_acls for r in results] == [(), ()]
            redis_server.start()
            deadline = time.monotonic() + 120  # a safety net: the broker reconnects at once
            while (found := conn.request(describe)).error_code != ErrorCode.none:
                assert time.monotonic() < deadline, found
                time.sleep(0.2)
            principals = [a.principal for r in found.resources for a in r.acls]
            assert principals == ["User:kept"]  # none added, none removed
        logged = broker.stderr(mark)
        assert "Traceback" not in logged, logged
    finally:
        broker.stop()
        redis_server.stop()
