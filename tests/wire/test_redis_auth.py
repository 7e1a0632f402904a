"""The CLI and the broker on a Redis that wants a password (requirepass) or an ACL user;
the password from the URL, --redis-password-file or REDIS_PASSWORD, and never echoed;
Redis over TLS (rediss://) through a TLS-terminating proxy (tests/tls_proxy.py), the test
redis-server having no TLS of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import RedisServer
from tests.tls_proxy import TlsProxy, server_context
from tests.wire.certificates import make_certificates
from tests.wire.conftest import REPO, Broker

PASSWORD = "pw-7c1d9e"
ACL_PASSWORD = "acl-2b8f0a"


@pytest.fixture(scope="module")
def password_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(
        tmp_path_factory.mktemp("redis-pw"), extra_args=["--requirepass", PASSWORD]
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def acl_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    acl = [
        "--user",
        "app",
        "on",
        f">{ACL_PASSWORD}",
        "~*",
        "&*",
        "+@all",
        "--user",
        "default",
        "off",
    ]
    server = RedisServer(tmp_path_factory.mktemp("redis-acl"), extra_args=acl)
    yield server
    server.stop()


def kafkaesque(url: str, *args: str, env: dict | None = None, input: bytes | None = None):
    command = [sys.executable, "-m", "kafkaesque", "--redis-url", url, *args]
    return subprocess.run(
        command,
        cwd=REPO,
        capture_output=True,
        timeout=60,
        input=input,
        env={**os.environ, **(env or {})},
        stdin=None if input is not None else subprocess.DEVNULL,
    )


def roundtrip(url: str, topic: str, env: dict | None = None, *extra: str) -> None:
    created = kafkaesque(url, *extra, "create", topic, env=env)
    assert created.returncode == 0, created.stderr
    produced = kafkaesque(url, *extra, "produce", topic, env=env, input=b"a\nb\n")
    assert produced.returncode == 0, produced.stderr
    consumed = kafkaesque(url, *extra, "consume", topic, env=env)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [b"a", b"b"]


def test_the_cli_with_a_password_in_the_url_a_file_or_the_environment(
    password_redis: RedisServer, tmp_path: Path
) -> None:
    port = password_redis.port
    roundtrip(f"redis://:{PASSWORD}@127.0.0.1:{port}/0", "in-url")
    roundtrip(f"redis://127.0.0.1:{port}/0", "in-env", {"REDIS_PASSWORD": PASSWORD})
    secret = tmp_path / "redis-password"
    secret.write_text(PASSWORD + "\n")
    roundtrip(f"redis://127.0.0.1:{port}/0", "in-file", None, "--redis-password-file", str(secret))


def test_the_cli_with_an_acl_user(acl_redis: RedisServer) -> None:
    roundtrip(f"redis://app:{ACL_PASSWORD}@127.0.0.1:{acl_redis.port}/0", "acl")


@pytest.mark.parametrize(
    "url,message",
    [
        ("redis://:wrong-secret@127.0.0.1:{port}/0", "Redis refused the login"),
        ("redis://127.0.0.1:{port}/0", "Redis wants a password"),
        ("redis://:wrong-secret@127.0.0.1:99999/0", "expected redis://"),
    ],
)
def test_refusals_are_one_line_without_the_password(
    password_redis: RedisServer, url: str, message: str
) -> None:
    result = kafkaesque(url.format(port=password_redis.port), "topics")
    err = result.stderr.decode()
    assert result.returncode != 0
    assert message in err
    assert "wrong-secret" not in err and "Traceback" not in err
    assert err.count("Error:") == 1


def broker_roundtrip(url: str, directory: Path, topic: str) -> str:
    """serve on ``url``, a record produced and consumed through it with a real client;
    the broker's stderr (it must show no Traceback)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    broker = Broker(url, directory)
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic, b"through the broker")
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = None
        for _ in range(30):
            message = consumer.poll(1.0)
            if message is not None:
                break
        consumer.close()
        assert message is not None and message.value() == b"through the broker"
    finally:
        broker.stop()
    log = broker.stderr()
    assert "Traceback" not in log, log
    return log


def test_the_broker_on_an_acl_user(acl_redis: RedisServer, tmp_path: Path) -> None:
    """serve, and a real client through it, on a Redis that only knows the ACL user."""
    url = f"redis://app:{ACL_PASSWORD}@127.0.0.1:{acl_redis.port}/0"
    assert ACL_PASSWORD not in broker_roundtrip(url, tmp_path / "broker", "acl-topic")


def test_redis_over_tls(redis_url: str, redis_server: RedisServer, tmp_path: Path) -> None:
    """The CLI and the broker on rediss://, verifying the server certificate against the
    test CA; the TLS proxy (tests/tls_proxy.py) hands the bytes to the real redis-server."""
    certs = make_certificates(tmp_path / "certs")
    with TlsProxy(redis_server.port, server_context(certs.server_cert, certs.server_key)) as proxy:
        url = f"rediss://127.0.0.1:{proxy.port}/0?ssl_ca_certs={certs.ca}"
        roundtrip(url, "tls")
        broker_roundtrip(url, tmp_path / "broker", "tls-broker")
        assert proxy.connections >= 4  # create, produce, consume, and the broker's


def test_redis_over_tls_with_another_ca(redis_server: RedisServer, tmp_path: Path) -> None:
    """A server certificate the URL's CA did not sign: one readable line, no Traceback."""
    certs = make_certificates(tmp_path / "certs")
    other = make_certificates(tmp_path / "other-ca")
    with TlsProxy(redis_server.port, server_context(certs.server_cert, certs.server_key)) as proxy:
        url = f"rediss://127.0.0.1:{proxy.port}/0?ssl_ca_certs={other.ca}"
        result = kafkaesque(url, "topics")
    err = result.stderr.decode()
    assert result.returncode != 0
    assert "Traceback" not in err and err.count("Error:") == 1, err
    [error] = [line for line in err.splitlines() if line.startswith("Error:")]
    assert error == (
        f"Error: cannot reach Redis: 127.0.0.1:{proxy.port} ([SSL: CERTIFICATE_VERIFY_FAILED]"
        " certificate verify failed: unable to get local issuer certificate)"
    ), err
    assert proxy.connections == 0  # no handshake completed
