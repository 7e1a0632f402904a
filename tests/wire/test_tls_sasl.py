"""Real clients over secured listeners: SASL_SSL with SCRAM-SHA-512, SASL_PLAINTEXT with
PLAIN, and SSL with mutual TLS for confluent-kafka, kafka-python, aiokafka, kafkajs and
kcat; SCRAM-SHA-256; Metadata answering with the listener the client came in on."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka_client import Connection, request
from tests.sasl_client import login
from tests.servers import RedisServer
from tests.wire.certificates import CLIENT_PRINCIPAL, Certificates, make_certificates
from tests.wire.clients import JS, kcat_path, params
from tests.wire.conftest import Broker
from tests.wire.secure import USERS, Secured, checked, closed, start_secured, start_with_users

COUNT = 20
VALUES = [b"value-%d" % i for i in range(COUNT)]
TIMEOUT = 60.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secured_module(
    redis_server: RedisServer, broker_factory: Callable[..., Broker], certs: Certificates
) -> Secured:
    return start_with_users(
        redis_server.url,
        broker_factory,
        certs,
        ("SASL_SSL", "SASL_PLAINTEXT", "SSL"),
        "--advertised-listener",
        "SSL://localhost:0",  # any port: the one it listens on
    )


@pytest.fixture(scope="module")
def mtls_module(broker_factory: Callable[..., Broker], certs: Certificates) -> Secured:
    """Mutual TLS, with ACLs that let only the client certificate's subject through: a
    client gets anywhere only if the broker took it for CLIENT_PRINCIPAL."""
    return start_secured(
        broker_factory, certs, ("SSL",), "--tls-ca", certs.ca,
        "--authorizer", "acl", "--super-user", CLIENT_PRINCIPAL,
    )  # fmt: skip


@pytest.fixture
def secured(secured_module: Secured, request: pytest.FixtureRequest) -> Iterator[Secured]:
    yield from checked(secured_module, request)


@pytest.fixture
def mtls(mtls_module: Secured, request: pytest.FixtureRequest) -> Iterator[Secured]:
    yield from checked(mtls_module, request)


# (listener, mechanism, user): SCRAM over TLS, PLAIN over plaintext
SETUPS = {
    "sasl_ssl-scram512": ("SASL_SSL", "SCRAM-SHA-512", "alice"),
    "sasl_plaintext-plain": ("SASL_PLAINTEXT", "PLAIN", "alice"),
}


def librdkafka_config(
    secured: Secured,
    listener: str,
    mechanism: str | None,
    user: str | None,
    client_cert: bool = False,
):
    config = {"bootstrap.servers": secured.address(listener), "security.protocol": listener}
    if "SSL" in listener:
        config["ssl.ca.location"] = secured.certs.ca
    if client_cert:
        config["ssl.certificate.location"] = secured.certs.client_cert
        config["ssl.key.location"] = secured.certs.client_key
    if mechanism is not None:
        password = USERS[user][1]
        config.update(
            {"sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password}
        )
    return config


def confluent_roundtrip(config: dict, topic: str) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer(config)
    for value in VALUES:
        producer.produce(topic, value)
    assert producer.flush(TIMEOUT) == 0
    consumer = Consumer({**config, "group.id": topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < COUNT and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None:
            assert message.error() is None, message.error()
            got.append(message.value())
    consumer.close()
    return got


def python_client_options(
    secured: Secured, listener: str, mechanism: str | None, user: str | None
) -> dict:
    """kafka-python's and aiokafka's common options (they share the names)."""
    options: dict = dict(bootstrap_servers=secured.address(listener), security_protocol=listener)
    if mechanism is not None:
        options.update(
            sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=USERS[user][1]
        )
    return options


def kafka_python_roundtrip(
    secured: Secured,
    listener: str,
    mechanism: str | None,
    user: str | None,
    topic: str,
    client_cert: bool = False,
):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    options = python_client_options(secured, listener, mechanism, user)
    if "SSL" in listener:
        options["ssl_cafile"] = secured.certs.ca
    if client_cert:
        options["ssl_certfile"] = secured.certs.client_cert
        options["ssl_keyfile"] = secured.certs.client_key
    producer = KafkaProducer(**options)
    for value in VALUES:
        producer.send(topic, value)
    producer.flush(TIMEOUT)
    producer.close()
    consumer = KafkaConsumer(**options, consumer_timeout_ms=10_000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = [m.value for _, m in zip(range(COUNT), consumer, strict=False)]
    consumer.close()
    return got


def aiokafka_roundtrip(
    secured: Secured,
    listener: str,
    mechanism: str | None,
    user: str | None,
    topic: str,
    client_cert: bool = False,
):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    options = python_client_options(secured, listener, mechanism, user)
    if "SSL" in listener:
        options["ssl_context"] = secured.client_context(client_cert)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**options)
        await producer.start()
        try:
            for value in VALUES:
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**options, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            got: list[bytes] = []
            async with asyncio.timeout(TIMEOUT):
                while len(got) < COUNT:
                    batches = await consumer.getmany(timeout_ms=1000)
                    got += [m.value for ms in batches.values() for m in ms]
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


def kafkajs_roundtrip(
    secured: Secured,
    listener: str,
    mechanism: str | None,
    user: str | None,
    topic: str,
    client_cert: bool = False,
):
    command = {
        "brokers": secured.address(listener),
        "topic": topic,
        "count": COUNT,
        "ca": secured.certs.ca if "SSL" in listener else None,
        "cert": secured.certs.client_cert if client_cert else None,
        "key": secured.certs.client_key if client_cert else None,
        "mechanism": mechanism.lower() if mechanism else None,
        "username": user,
        "password": USERS[user][1] if user else None,
    }
    result = subprocess.run(
        ["node", str(JS / "kafkajs_sasl.js")],
        input=json.dumps(command).encode(),
        capture_output=True,
        timeout=120,
        cwd=JS,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return [v.encode() for v in json.loads(result.stdout)["values"]]


def kcat_roundtrip(
    secured: Secured,
    listener: str,
    mechanism: str | None,
    user: str | None,
    topic: str,
    client_cert: bool = False,
):
    config = librdkafka_config(secured, listener, mechanism, user, client_cert)
    args = [kcat_path(), "-b", config.pop("bootstrap.servers"), "-X", "broker.address.family=v4"]
    args += [a for k, v in config.items() for a in ("-X", f"{k}={v}")]
    lines = b"".join(v + b"\n" for v in VALUES)
    produced = subprocess.run([*args, "-P", "-t", topic], input=lines, capture_output=True)
    assert produced.returncode == 0, produced.stderr.decode(errors="replace")
    consumed = subprocess.run(
        [*args, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q"],
        capture_output=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert consumed.returncode == 0, consumed.stderr.decode(errors="replace")
    return consumed.stdout.splitlines()


ROUNDTRIPS = {
    "confluent": lambda s, listener, mech, user, topic, client_cert=False: confluent_roundtrip(
        librdkafka_config(s, listener, mech, user, client_cert), topic
    ),
    "kafka-python": kafka_python_roundtrip,
    "aiokafka": aiokafka_roundtrip,
    "kafkajs": kafkajs_roundtrip,
    "kcat": kcat_roundtrip,
}


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("library", params(*ROUNDTRIPS))
def test_clients_produce_and_consume(secured: Secured, topic_name, library: str, setup: str):
    listener, mechanism, user = SETUPS[setup]
    topic = topic_name(library)
    assert ROUNDTRIPS[library](secured, listener, mechanism, user, topic) == VALUES


def test_scram_sha_256_over_sasl_plaintext(secured: Secured, topic_name) -> None:
    config = librdkafka_config(secured, "SASL_PLAINTEXT", "SCRAM-SHA-256", "bob")
    assert confluent_roundtrip(config, topic_name()) == VALUES


def test_ssl_without_client_certificates(secured: Secured, topic_name) -> None:
    """The SSL listener advertises localhost (--advertised-listener), which the server
    certificate names: librdkafka verifies it and reconnects there."""
    config = librdkafka_config(secured, "SSL", None, None)
    assert confluent_roundtrip(config, topic_name()) == VALUES


@pytest.mark.parametrize("library", params(*ROUNDTRIPS))
def test_mutual_tls(mtls: Secured, topic_name, library: str) -> None:
    """Each client presents the client certificate. The broker lets only CLIENT_PRINCIPAL
    through (mtls_module), so the round trip shows it took the certificate's subject for
    the principal; an anonymous client (PLAINTEXT) is refused the same topic."""
    topic = topic_name(library)
    assert ROUNDTRIPS[library](mtls, "SSL", None, None, topic, client_cert=True) == VALUES
    with mtls.connect("PLAINTEXT") as conn:
        [refused] = conn.metadata([topic]).topics
    assert refused.error_code == ErrorCode.topic_authorization_failed


def test_mutual_tls_refuses_a_client_without_a_certificate(mtls: Secured) -> None:
    start = mtls.broker.stderr_size()
    with pytest.raises((ssl.SSLError, ConnectionError)):
        conn = mtls.connect("SSL")  # TLS 1.3: the refusal may come at the first read
        conn.api_versions()
    time.sleep(0.3)
    assert mtls.broker.stderr(start).count("TLS handshake failed") == 1


def test_the_principal_of_a_client_certificate(certs: Certificates) -> None:
    """Kafka's default principal builder: the subject's RFC 2253 name."""
    from wire.net.security import distinguished_name

    decoded = ssl._ssl._test_decode_cert(certs.client_cert)  # as getpeercert() gives it
    assert f"User:{distinguished_name(decoded)}" == CLIENT_PRINCIPAL
    escaped = {"subject": ((("organizationName", "A, B+C"),), (("commonName", "#x "),))}
    assert distinguished_name(escaped) == "CN=\\#x\\ ,O=A\\, B\\+C"


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT"])
def test_metadata_advertises_the_listener_the_client_used(secured: Secured, listener: str):
    with secured.connect(listener) as conn:
        if listener.startswith("SASL"):
            assert login(conn, "SCRAM-SHA-512", "alice", USERS["alice"][1]).error_code == 0
        brokers = conn.metadata([]).brokers
        coordinator = conn.request(request(10, 2, key="g", key_type=0))
        cluster = conn.request(request(60, 1, include_cluster_authorized_operations=False))
    host = "localhost" if listener == "SSL" else "127.0.0.1"
    assert [(b.host, b.port) for b in brokers] == [(host, secured.ports[listener])]
    assert (coordinator.host, coordinator.port) == (host, secured.ports[listener])
    assert [(b.host, b.port) for b in cluster.brokers] == [(host, secured.ports[listener])]


def test_a_plaintext_client_on_a_tls_port_is_closed(secured: Secured) -> None:
    start = secured.broker.stderr_size()
    for listener in ("SSL", "SASL_SSL"):
        conn = Connection(secured.address(listener))
        with conn:
            conn.send(b"\0\0\0\x0a" + b"\0\x12\0\0\0\0\0\x01\xff\xff")  # ApiVersions v0
            assert closed(conn)
    time.sleep(0.3)
    assert secured.broker.stderr(start).count("TLS handshake failed") == 2


def test_tls_to_a_plaintext_port_is_closed(secured: Secured) -> None:
    start = secured.broker.stderr_size()
    for listener in ("PLAINTEXT", "SASL_PLAINTEXT"):
        conn = Connection(secured.address(listener))
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            secured.client_context().wrap_socket(conn.sock, server_hostname="127.0.0.1")
        conn.close()
    time.sleep(0.3)
    text = secured.broker.stderr(start)
    assert "TLS handshake on the PLAINTEXT listener" in text
    assert "TLS handshake on the SASL_PLAINTEXT listener" in text
