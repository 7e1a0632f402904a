"""The nemesis' TCP proxy on its own (no Kafka, no Redis): it forwards, ``drop`` closes
connections and refuses new ones, ``hold`` forwards nothing until ``heal`` delivers what
waited."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from tests.jepsen.topology import TcpProxy


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy = TcpProxy(server.server_address[1])
    try:
        yield proxy
    finally:
        proxy.close()
        server.shutdown()
        server.server_close()


def connect(proxy: TcpProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=2)


def echo(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    return sock.recv(100)


def test_forwards(proxy: TcpProxy) -> None:
    with connect(proxy) as sock:
        assert echo(sock, b"ping") == b"ping"


def test_drop_closes_connections_and_refuses_new_ones_until_healed(proxy: TcpProxy) -> None:
    with connect(proxy) as sock:
        assert echo(sock, b"a") == b"a"
        proxy.drop()
        with pytest.raises(OSError):
            sock.sendall(b"b")
            if not sock.recv(100):
                raise ConnectionResetError("closed")
    with connect(proxy) as sock:  # accepted, then closed at once
        with pytest.raises(OSError):
            if not echo(sock, b"c"):
                raise ConnectionResetError("closed")
    proxy.heal()
    with connect(proxy) as sock:
        assert echo(sock, b"d") == b"d"


def test_hold_forwards_nothing_until_healed(proxy: TcpProxy) -> None:
    with connect(proxy) as sock:
        assert echo(sock, b"a") == b"a"
        proxy.hold()
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            echo(sock, b"held")
        proxy.heal()
        sock.settimeout(2)
        assert sock.recv(100) == b"held"  # what waited is delivered
