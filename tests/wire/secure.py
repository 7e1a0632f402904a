"""Brokers with secured listeners for the TLS and SASL tests, their users, and raw
connections to them (plain or TLS)."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import redis

from tests.kafka_client import Connection
from tests.servers import free_port, wait_for_port
from tests.wire.certificates import Certificates
from tests.wire.conftest import Broker, check_log

# name -> (mechanism, password); alice is also the PLAIN user (checked against SHA-512).
USERS = {"alice": ("SCRAM-SHA-512", "alice-secret"), "bob": ("SCRAM-SHA-256", "bob-secret")}


@dataclass
class Secured:
    """A broker and the port of each of its listeners (PLAINTEXT: the fixture's)."""

    broker: Broker
    certs: Certificates
    ports: dict[str, int] = field(default_factory=dict)

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def connect(self, listener: str, client_cert: bool = False) -> Connection:
        """A raw connection to ``listener``, TLS where the listener has it."""
        conn = Connection(self.address(listener))
        if listener in ("SSL", "SASL_SSL"):
            conn.sock = self.client_context(client_cert).wrap_socket(
                conn.sock, server_hostname="127.0.0.1"
            )
        return conn

    def client_context(self, client_cert: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.certs.ca)
        if client_cert:
            context.load_cert_chain(self.certs.client_cert, self.certs.client_key)
        return context

    def add_user(self, name: str, mechanism: str, password: str) -> None:
        self.broker.cli(
            "users", "add", name, "--mechanism", mechanism, "--password-stdin",
            input=password.encode() + b"\n",
        )  # fmt: skip


def start_secured(
    broker_factory: Callable[..., Broker],
    certs: Certificates,
    listeners: tuple[str, ...],
    *extra: str,
) -> Secured:
    """A broker with a PLAINTEXT listener (the fixture's port) and ``listeners``."""
    ports = {name: free_port() for name in listeners}
    args = [a for name, port in ports.items() for a in ("--listen", f"{name}://127.0.0.1:{port}")]
    args += ["--tls-cert", certs.server_cert, "--tls-key", certs.server_key, *extra]
    broker = broker_factory(*args)
    for port in ports.values():
        wait_for_port(port, broker.proc)
    return Secured(broker, certs, {"PLAINTEXT": broker.port, **ports})


def start_with_users(
    redis_url: str,
    broker_factory: Callable[..., Broker],
    certs: Certificates,
    listeners: tuple[str, ...],
    *extra: str,
) -> Secured:
    """``start_secured`` on an emptied Redis, with every one of ``USERS`` added."""
    redis.Redis.from_url(redis_url).flushall()
    secured = start_secured(broker_factory, certs, listeners, *extra)
    for name, (mechanism, password) in USERS.items():
        secured.add_user(name, mechanism, password)
    return secured


def checked(secured: Secured, request: pytest.FixtureRequest) -> Iterator[Secured]:
    """The module's secured broker for one test, which fails if the broker logged a
    Traceback or died meanwhile."""
    check_log(secured.broker, 0, "an earlier test or start-up")
    start = secured.broker.stderr_size()
    yield secured
    check_log(secured.broker, start, request.node.name)


def closed(conn: Connection, timeout: float = 5.0) -> bool:
    """Whether the server closes ``conn`` (EOF, reset, or a TLS alert) within ``timeout``."""
    conn.sock.settimeout(timeout)
    try:
        return conn.sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False
