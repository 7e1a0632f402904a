"""The cost of TLS and SASL: confluent-kafka through a SASL_SSL listener (SCRAM-SHA-512)
against the same broker's PLAINTEXT listener in the same run, and authentications per
second.

Starts a private redis-server and one `kafkaesque serve` with PLAINTEXT, SASL_PLAINTEXT and
SASL_SSL listeners (a throwaway CA and server certificate made with openssl). Produces N
records of 100 bytes through each of PLAINTEXT and SASL_SSL and consumes them back, R rounds
alternating the two (after a warm-up), and prints the best records/s of each and the ratio
secured / plaintext. Then opens connections one after another for
S seconds each: PLAINTEXT with one ApiVersions request (the baseline), SASL_PLAINTEXT and
SASL_SSL each authenticated with SCRAM-SHA-512 (the client's PBKDF2 is computed once and
reused, so the figure is the broker's and the handshakes', not the client's hashing).

    python scripts/bench/security.py [--records N] [--rounds R] [--seconds S]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import secrets
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from broker_process import FAST_CONSUMER, consume, free_port, produce

from kafkaesque.hot.embedded import EmbeddedRedis

USER, PASSWORD = "bench", "bench-password"


def certificates(directory: Path) -> tuple[str, str, str]:
    """(ca, server certificate, server key) for 127.0.0.1, made with openssl."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-subj", "/CN=bench CA", "-days", "1")  # fmt: skip
    (directory / "ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
            "server.csr", "-subj", "/CN=127.0.0.1")  # fmt: skip
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-extfile", "ext", "-days", "1")  # fmt: skip
    return tuple(str(directory / name) for name in ("ca.pem", "server.pem", "server.key"))


REPO = Path(__file__).resolve().parents[2]  # the working directory of the subprocesses:
# from scripts/bench, `python -m kafkaesque` would import the benchmark wire.py as `wire`


def start(url: str, ports: dict[str, int], cert: str, key: str, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "kafkaesque", "--redis-url", url, "serve", "--no-archive"]
    for name, port in ports.items():
        command += ["--listen", f"{name}://127.0.0.1:{port}"]
    command += ["--tls-cert", cert, "--tls-key", key]
    with log.open("wb") as err:
        proc = subprocess.Popen(command, stderr=err, cwd=REPO)
    for port in ports.values():
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    error = log.read_text(errors="replace")
                    raise RuntimeError(f"broker did not start: {error}") from None
                time.sleep(0.02)
    return proc


# -- a minimal raw client: ApiVersions v0, SaslHandshake v1, SaslAuthenticate v0 ----------


def request(api_key: int, version: int, correlation: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation, 5) + b"bench"
    return struct.pack(">i", len(header) + len(body)) + header + body


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def authenticate(sock: socket.socket, salted: dict[bytes, bytes]) -> None:
    """SCRAM-SHA-512 with SaslHandshake v1 + SaslAuthenticate v0; raises on a refusal."""
    mechanism = b"SCRAM-SHA-512"
    sock.sendall(request(17, 1, 1, struct.pack(">h", len(mechanism)) + mechanism))
    assert read_frame(sock)[4:6] == b"\0\0", "handshake refused"
    nonce = secrets.token_urlsafe(18)
    bare = f"n={USER},r={nonce}"

    def token(correlation: int, data: bytes) -> bytes:
        sock.sendall(request(36, 0, correlation, struct.pack(">i", len(data)) + data))
        frame = read_frame(sock)
        error, message_size = struct.unpack_from(">hh", frame, 4)
        assert error == 0, f"authentication refused ({error})"
        offset = 8 + max(message_size, 0)
        (size,) = struct.unpack_from(">i", frame, offset)
        return frame[offset + 4 : offset + 4 + size]

    server_first = token(2, f"n,,{bare}".encode())
    attrs = dict(a.split("=", 1) for a in server_first.decode().split(","))
    salt = base64.b64decode(attrs["s"])
    if salt not in salted:
        salted[salt] = hashlib.pbkdf2_hmac("sha512", PASSWORD.encode(), salt, int(attrs["i"]))
    client_key = hmac.new(salted[salt], b"Client Key", "sha512").digest()
    stored = hashlib.sha512(client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(stored, auth, "sha512").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    token(3, f"{without_proof},p={base64.b64encode(proof).decode()}".encode())


def connections_per_second(port: int, seconds: float, tls: ssl.SSLContext | None, sasl: bool):
    salted: dict[bytes, bytes] = {}
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        sock = socket.create_connection(("127.0.0.1", port))
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname="127.0.0.1")
        if sasl:
            authenticate(sock, salted)
        else:
            sock.sendall(request(18, 0, 1, b""))
            read_frame(sock)
        sock.close()
        done += 1
    return done / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.records
    names = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")
    ports = {name: free_port() for name in names}
    with tempfile.TemporaryDirectory(prefix="ks-bench-") as home:
        ca, cert, key = certificates(Path(home))
        server = EmbeddedRedis(Path(home) / "redis")
        url = server.ensure_started()
        broker = None
        try:
            subprocess.run(
                [sys.executable, "-m", "kafkaesque", "--redis-url", url, "users", "add", USER,
                 "--password-env", "BENCH_PASSWORD"],
                env={**os.environ, "BENCH_PASSWORD": PASSWORD},
                cwd=REPO,
                check=True,
                capture_output=True,
            )  # fmt: skip
            broker = start(url, ports, cert, key, Path(home) / "broker.log")
            secure = {
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": ca,
                "sasl.mechanisms": "SCRAM-SHA-512",
                "sasl.username": USER,
                "sasl.password": PASSWORD,
            }
            plain_bootstrap = f"127.0.0.1:{ports['PLAINTEXT']}"
            secure_bootstrap = f"127.0.0.1:{ports['SASL_SSL']}"
            setups = (("PLAINTEXT", plain_bootstrap, {}), ("SASL_SSL", secure_bootstrap, secure))
            for label, bootstrap, config in setups:  # warm-up: topics, connections, caches
                produce(bootstrap, f"warm-{label}", 10_000, config=config)
            # Rounds alternate the listeners; each keeps its best time.
            times: dict[str, list[float]] = {label: [1e9, 1e9] for label, _, _ in setups}
            for round_ in range(args.rounds):
                for label, bootstrap, config in setups:
                    topic = f"bench-{label.lower()}-{round_}"
                    best = times[label]
                    best[0] = min(best[0], produce(bootstrap, topic, n, config=config))
                    fast = {**FAST_CONSUMER, **config}
                    best[1] = min(best[1], consume(bootstrap, topic, n, fast))
            context = ssl.create_default_context(cafile=ca)
            rates = {
                "PLAINTEXT connect + ApiVersions": connections_per_second(
                    ports["PLAINTEXT"], args.seconds, None, False
                ),
                "SASL_PLAINTEXT connect + SCRAM-SHA-512": connections_per_second(
                    ports["SASL_PLAINTEXT"], args.seconds, None, True
                ),
                "SASL_SSL connect + TLS + SCRAM-SHA-512": connections_per_second(
                    ports["SASL_SSL"], args.seconds, context, True
                ),
            }
        finally:
            if broker is not None:
                broker.terminate()
                broker.wait(10)
            server.stop()
    print(f"{n} records of 100 bytes, confluent-kafka <-> kafkaesque serve <-> redis-server")
    print(f"(cpus: {os.cpu_count()}; client, broker and Redis share them)")
    for index, what in enumerate(("produce", "consume (fetch.queue.backoff.ms=50)")):
        plain, secured = times["PLAINTEXT"][index], times["SASL_SSL"][index]
        print(
            f"{what + ':':<38}PLAINTEXT {n / plain:>10,.0f} records/s   "
            f"SASL_SSL {n / secured:>10,.0f} records/s   ratio {plain / secured:.2f}"
        )
    baseline = rates["PLAINTEXT connect + ApiVersions"]
    for label, rate in rates.items():
        print(f"{label + ':':<44}{rate:>8,.0f} connections/s   ratio {rate / baseline:.2f}")


if __name__ == "__main__":
    main()
