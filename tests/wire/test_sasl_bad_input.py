"""SASL refusals on the wire, with a raw client: wrong passwords, unknown users, a
mechanism not enabled, requests before authentication, oversized tokens, SCRAM messages
with a wrong nonce or proof, repeated failures (each delayed), expired sessions and a user
deleted before its re-authentication; the v0 handshake's bare tokens."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka_client import Connection, request
from tests.sasl_client import ScramClient, authenticate, handshake, login
from tests.servers import RedisServer
from tests.wire.certificates import make_certificates
from tests.wire.conftest import REPO, Broker
from tests.wire.secure import USERS, Secured, checked, closed, start_with_users

DELAY_MS = 300
REAUTH_MS = 1500
FAILED = ErrorCode.sasl_authentication_failed
PASSWORD = USERS["alice"][1]


@pytest.fixture(scope="module")
def strict_module(
    redis_server: RedisServer,
    broker_factory: Callable[..., Broker],
    tmp_path_factory: pytest.TempPathFactory,
) -> Secured:
    """SCRAM only (no PLAIN), sessions of 1.5 s, failures answered after 300 ms."""
    return start_with_users(
        redis_server.url,
        broker_factory,
        make_certificates(tmp_path_factory.mktemp("certs")),
        ("SASL_PLAINTEXT", "SASL_SSL"),
        "--sasl-enabled-mechanisms",
        "SCRAM-SHA-512,SCRAM-SHA-256",
        "--connections-max-reauth-ms",
        str(REAUTH_MS),
        "--failed-authentication-delay-ms",
        str(DELAY_MS),
    )


@pytest.fixture
def strict(strict_module: Secured, request: pytest.FixtureRequest) -> Iterator[Secured]:
    yield from checked(strict_module, request)


def scram_exchange(conn: Connection, client: ScramClient, **final_options) -> object:
    assert handshake(conn, "SCRAM-SHA-512").error_code == ErrorCode.none
    first = authenticate(conn, client.first())
    assert first.error_code == ErrorCode.none, first
    return authenticate(conn, client.final(first.auth_bytes, **final_options))


def test_scram_authenticates_and_reports_the_session_lifetime(strict: Secured) -> None:
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        with strict.connect(listener) as conn:
            answer = login(conn, "SCRAM-SHA-512", "alice", PASSWORD)
            assert answer.error_code == ErrorCode.none
            assert answer.session_lifetime.total_seconds() * 1000 == REAUTH_MS
            assert conn.metadata([]).brokers[0].port == strict.ports[listener]


def test_a_wrong_password_is_refused_after_the_delay_and_closed(strict: Secured) -> None:
    start = strict.broker.stderr_size()
    with strict.connect("SASL_SSL") as conn:
        began = time.monotonic()
        answer = login(conn, "SCRAM-SHA-512", "alice", "not-the-password")
        assert time.monotonic() - began >= DELAY_MS / 1000
        assert answer.error_code == FAILED
        assert "SCRAM-SHA-512" in answer.error_message
        assert closed(conn)
    log = strict.broker.stderr(start)
    assert "authentication failed" in log and "'alice'" in log
    assert "not-the-password" not in log


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_an_unknown_user_is_refused(strict: Secured, mechanism: str) -> None:
    with strict.connect("SASL_PLAINTEXT") as conn:
        assert handshake(conn, mechanism).error_code == ErrorCode.none
        answer = authenticate(conn, ScramClient(mechanism, "mallory", "x").first())
        assert answer.error_code == FAILED
        assert closed(conn)


def test_a_user_of_another_mechanism_is_unknown_to_this_one(strict: Secured) -> None:
    """bob has only a SCRAM-SHA-256 credential."""
    with strict.connect("SASL_PLAINTEXT") as conn:
        assert login(conn, "SCRAM-SHA-512", "bob", USERS["bob"][1]).error_code == FAILED
    with strict.connect("SASL_PLAINTEXT") as conn:
        assert login(conn, "SCRAM-SHA-256", "bob", USERS["bob"][1]).error_code == 0


def test_a_mechanism_not_enabled_is_refused(strict: Secured) -> None:
    with strict.connect("SASL_PLAINTEXT") as conn:
        answer = handshake(conn, "PLAIN")
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(answer.mechanisms) == {"SCRAM-SHA-512", "SCRAM-SHA-256"}
        assert closed(conn)


def test_sasl_requests_on_a_listener_without_sasl(strict: Secured) -> None:
    with strict.connect("PLAINTEXT") as conn:
        assert handshake(conn, "PLAIN").error_code == ErrorCode.illegal_sasl_state
        assert authenticate(conn, b"\0a\0b").error_code == ErrorCode.illegal_sasl_state
        assert conn.metadata([]).brokers[0].port == strict.ports["PLAINTEXT"]


def test_authenticate_before_the_handshake_is_refused(strict: Secured) -> None:
    with strict.connect("SASL_PLAINTEXT") as conn:
        assert authenticate(conn, b"n,,n=alice,r=abc").error_code == ErrorCode.illegal_sasl_state
        assert closed(conn)


def test_other_requests_before_authentication_close_the_connection(strict: Secured) -> None:
    start = strict.broker.stderr_size()
    with strict.connect("SASL_PLAINTEXT") as conn:
        assert conn.api_versions(3).error_code == ErrorCode.none  # allowed
        conn.send_request(request(3, 4, topics=[], allow_auto_topic_creation=False))
        assert closed(conn)
    with strict.connect("SASL_SSL") as conn:  # between handshake and authentication
        assert handshake(conn, "SCRAM-SHA-512").error_code == ErrorCode.none
        conn.send_request(request(3, 4, topics=[], allow_auto_topic_creation=False))
        assert closed(conn)
    assert strict.broker.stderr(start).count("before SASL authentication") == 2


def test_an_oversized_token_closes_the_connection(strict: Secured) -> None:
    start = strict.broker.stderr_size()
    with strict.connect("SASL_PLAINTEXT") as conn:
        assert handshake(conn, "SCRAM-SHA-512").error_code == ErrorCode.none
        conn.send((600_000).to_bytes(4, "big") + b"\0\x24\0\x02")  # the rest never comes
        assert closed(conn)
    assert "SASL frame of 600000 bytes before authentication" in strict.broker.stderr(start)


def test_a_scram_final_message_with_a_wrong_nonce(strict: Secured) -> None:
    with strict.connect("SASL_PLAINTEXT") as conn:
        answer = scram_exchange(conn, ScramClient("SCRAM-SHA-512", "alice", PASSWORD), nonce="x")
        assert answer.error_code == FAILED
        assert closed(conn)


def test_a_scram_final_message_with_a_wrong_proof(strict: Secured) -> None:
    with strict.connect("SASL_PLAINTEXT") as conn:
        client = ScramClient("SCRAM-SHA-512", "alice", PASSWORD)
        assert scram_exchange(conn, client, tamper=True).error_code == FAILED
        assert closed(conn)


def test_garbage_scram_messages_are_refused(strict: Secured) -> None:
    for token in (b"", b"\xff\xfe", b"n,,", b"p=tls-unique,,n=alice,r=x"):
        with strict.connect("SASL_PLAINTEXT") as conn:
            assert handshake(conn, "SCRAM-SHA-512").error_code == ErrorCode.none
            assert authenticate(conn, token).error_code == FAILED
            assert closed(conn)


def test_repeated_failures_from_one_address_are_each_delayed(strict: Secured) -> None:
    start = strict.broker.stderr_size()
    for attempt in range(3):
        with strict.connect("SASL_PLAINTEXT") as conn:
            began = time.monotonic()
            assert login(conn, "SCRAM-SHA-512", "alice", f"guess-{attempt}").error_code == FAILED
            assert time.monotonic() - began >= DELAY_MS / 1000
    assert strict.broker.stderr(start).count("authentication failed from ('127.0.0.1'") == 3


def test_an_expired_session_closes_at_the_next_request(strict: Secured) -> None:
    start = strict.broker.stderr_size()
    with strict.connect("SASL_PLAINTEXT") as conn:
        assert login(conn, "SCRAM-SHA-512", "alice", PASSWORD).error_code == ErrorCode.none
        time.sleep(REAUTH_MS / 1000 + 0.3)
        conn.send_request(request(3, 4, topics=[], allow_auto_topic_creation=False))
        assert closed(conn)
    assert "SASL session of user 'alice' expired" in strict.broker.stderr(start)


def test_reauthentication_renews_the_session(strict: Secured) -> None:
    with strict.connect("SASL_SSL") as conn:
        assert login(conn, "SCRAM-SHA-512", "alice", PASSWORD).error_code == ErrorCode.none
        for _ in range(2):
            time.sleep(REAUTH_MS / 1000 * 0.7)
            assert login(conn, "SCRAM-SHA-512", "alice", PASSWORD).error_code == ErrorCode.none
        assert conn.metadata([]).brokers  # 2.1 s after the first login, within the session


def test_reauthentication_cannot_change_the_user(strict: Secured) -> None:
    with strict.connect("SASL_PLAINTEXT") as conn:
        assert login(conn, "SCRAM-SHA-512", "alice", PASSWORD).error_code == ErrorCode.none
        assert login(conn, "SCRAM-SHA-256", "bob", USERS["bob"][1]).error_code == FAILED
        assert closed(conn)


def cli_when_told(broker: Broker, *args: str) -> subprocess.Popen[bytes]:
    """``kafkaesque ARGS`` on the broker's Redis, in a process started now that runs the
    command (kafkaesque.cli.main, as ``python -m kafkaesque``) once a line arrives on its
    stdin: its start, seconds on a loaded machine, is behind it by then."""
    code = (
        "import sys; from kafkaesque.cli import main; print('ready', flush=True); "
        "sys.stdin.readline(); sys.argv[0] = 'kafkaesque'; main()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *broker.global_args, *args],
        cwd=REPO,
        env=broker.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_a_user_deleted_while_connected_fails_its_reauthentication(strict: Secured) -> None:
    # The CLI must delete the user within the session's lifetime (REAUTH_MS): it is started
    # beforehand, and should it still take too long (a loaded machine), it runs again with
    # another user.
    for attempt in range(5):
        user = f"carol-{attempt}"
        strict.add_user(user, "SCRAM-SHA-512", "carol-secret")
        delete = cli_when_told(strict.broker, "users", "delete", user)
        with strict.connect("SASL_PLAINTEXT") as conn:
            assert login(conn, "SCRAM-SHA-512", user, "carol-secret").error_code == 0
            started = time.monotonic()
            _, err = delete.communicate(b"go\n", timeout=60)
            assert delete.returncode == 0, err.decode()
            if time.monotonic() - started > REAUTH_MS / 1000 / 2:
                continue
            assert conn.metadata([]).brokers  # the session still runs...
            assert login(conn, "SCRAM-SHA-512", user, "carol-secret").error_code == FAILED
            assert closed(conn)  # ...until its re-authentication
            return
    pytest.fail("the CLI never deleted a user within half a session's lifetime")


def test_the_v0_handshake_takes_bare_tokens(strict: Secured) -> None:
    """Kafka's original framing: after SaslHandshake v0 the tokens are size-prefixed
    frames of their own, without a request header."""
    with strict.connect("SASL_PLAINTEXT") as conn:
        assert handshake(conn, "SCRAM-SHA-256", version=0).error_code == ErrorCode.none
        client = ScramClient("SCRAM-SHA-256", "bob", USERS["bob"][1])
        token = client.first()
        conn.send(len(token).to_bytes(4, "big") + token)
        server_first = conn.read_frame()
        token = client.final(server_first)
        conn.send(len(token).to_bytes(4, "big") + token)
        assert client.verify(conn.read_frame())
        assert conn.metadata([]).brokers[0].port == strict.ports["SASL_PLAINTEXT"]
    with strict.connect("SASL_PLAINTEXT") as conn:  # a wrong password: closed, no answer
        assert handshake(conn, "SCRAM-SHA-256", version=0).error_code == ErrorCode.none
        client = ScramClient("SCRAM-SHA-256", "bob", "wrong")
        token = client.first()
        conn.send(len(token).to_bytes(4, "big") + token)
        token = client.final(conn.read_frame())
        conn.send(len(token).to_bytes(4, "big") + token)
        assert conn.read_frame() is None


def test_librdkafka_reauthenticates_within_its_sessions(strict: Secured, topic_name) -> None:
    """KIP-368 with a real client: librdkafka re-authenticates before each 1.5 s session
    ends, so its connection is never closed for an expired session."""
    from confluent_kafka import Producer

    start = strict.broker.stderr_size()
    producer = Producer(
        {
            "bootstrap.servers": strict.address("SASL_SSL"),
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": strict.certs.ca,
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": PASSWORD,
        }
    )
    topic = topic_name()
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic, b"x")
        sent += 1
        assert producer.flush(10) == 0
        time.sleep(0.05)
    assert sent > 10
    log = strict.broker.stderr(start)
    assert "expired" not in log and "authentication failed" not in log, log


def test_describe_configs_shows_the_security_settings(strict: Secured) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": strict.address("PLAINTEXT")})
    resource = ConfigResource(ResourceType.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(30)
    values = {name: entry.value for name, entry in configs.items()}
    assert values["advertised.listeners"].split(",") == [
        f"{name}://127.0.0.1:{strict.ports[name]}"
        for name in ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")
    ]
    assert values["sasl.enabled.mechanisms"] == "SCRAM-SHA-512,SCRAM-SHA-256"
    assert values["connections.max.reauth.ms"] == str(REAUTH_MS)
    assert values["connection.failed.authentication.delay.ms"] == str(DELAY_MS)
