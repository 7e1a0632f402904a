"""Log lines a client's input causes are few and short however much it sends: a failed
login's user name is cut to a prefix, and each kind of refusal is logged once, then
counted once a minute (kafkaesque/log_throttle.py LogThrottle), so an unauthenticated client
cannot fill the disk with WARNING lines."""

from __future__ import annotations

import random
import socket
import struct
from concurrent.futures import ThreadPoolExecutor

from kio.schema.errors import ErrorCode

from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection, encode_request, produce_request, request
from tests.servers import free_port, wait_for_port
from tests.wire.conftest import Broker

LOGINS = 1000
# Any user name far over the 1 KB a login may log on average: each line with the name in
# full (as before) writes 100 MB, a hundred times the bound.
USER_NAME_BYTES = 100_000
MALFORMED = 10_000


def failed_login(port: int, token: bytes) -> None:
    with Connection(f"127.0.0.1:{port}") as conn:
        conn.sock.sendall(encode_request(request(17, 1, mechanism="PLAIN"), 1))
        assert conn.read_frame() is not None
        answer = conn.request(request(36, 2, auth_bytes=token))
        assert answer.error_code == ErrorCode.sasl_authentication_failed


def test_failed_logins_with_huge_user_names_log_little(broker_factory) -> None:
    """1,000 failed PLAIN logins, each with a 100 KB user name: under 1 MB of log (before:
    the name in full in each line, 100 MB)."""
    port = free_port()
    broker: Broker = broker_factory(
        "--listen",
        f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "--sasl-enabled-mechanisms",
        "PLAIN",
        "--failed-authentication-delay-ms",
        "1",
    )
    wait_for_port(port, broker.proc)
    mark = broker.stderr_size()
    token = b"\0" + b"u" * USER_NAME_BYTES + b"\0password"
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda _: failed_login(port, token), range(LOGINS)))
    written = broker.stderr_size() - mark
    print(f"{LOGINS} failed logins wrote {written} bytes of log")
    assert written < 1 << 20, broker.stderr(mark)[:3000]
    assert "authentication failed from" in broker.stderr(mark)


def malformed_frame(rng: random.Random) -> bytes:
    """A frame the broker refuses and closes the connection for: a size out of range, an
    unknown api key or version, garbage after a valid header, a truncated header."""
    kind = rng.randrange(4)
    if kind == 0:
        return struct.pack(">i", rng.choice([-1, 0, (100 << 20) + 1, 2**31 - 1]))
    if kind == 1:
        body = struct.pack(">hhi", rng.randrange(1000, 30000), 0, 1) + b"\xff\xff"
    elif kind == 2:
        body = struct.pack(">hhih", 3, 12, 1, -1) + rng.randbytes(rng.randrange(1, 64))
    else:
        body = b"\x00"
    return struct.pack(">i", len(body)) + body


def send_refused(port: int, frames: list[bytes]) -> None:
    for frame in frames:
        with socket.create_connection(("127.0.0.1", port), 5) as sock:
            try:
                sock.sendall(frame)
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(65536):
                    pass
            except OSError:
                pass  # reset: closed with our bytes unread


def test_malformed_frames_log_little(broker_factory) -> None:
    """10,000 refused frames (each closes its connection): under 100 KB of log, the first
    of each kind in full, then a count (before: a 130-byte line each, 1.3 MB)."""
    broker: Broker = broker_factory()
    mark = broker.stderr_size()
    rng = random.Random(7)
    frames = [malformed_frame(rng) for _ in range(MALFORMED)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: send_refused(broker.port, frames[i::8]), range(8)))
    with Connection(broker.bootstrap) as conn:  # the broker still serves
        assert conn.api_versions().error_code == ErrorCode.none
    written = broker.stderr_size() - mark
    print(f"{MALFORMED} malformed frames wrote {written} bytes of log")
    assert written < 100_000, broker.stderr(mark)[:3000]
    assert "closing connection from" in broker.stderr(mark)


def test_refused_batches_log_little(broker_factory) -> None:
    """2,000 produce requests whose batch is refused INVALID_RECORD (keyless records for a
    compact topic): a burst of lines, then a count (before: a line each)."""
    broker: Broker = broker_factory()
    broker.cli("create", "refused", "--config", "cleanup.policy=compact")
    keyless = build_batch([b"no key"])
    mark = broker.stderr_size()
    with Connection(broker.bootstrap) as conn:
        for _ in range(2000):
            answer = conn.request(produce_request("refused", {0: keyless}, acks=1))
            [partition] = answer.responses[0].partition_responses
            assert partition.error_code == ErrorCode.invalid_record
    logged = broker.stderr(mark)
    print(f"2000 refused batches wrote {len(logged)} bytes of log")
    assert logged.count("rejected batch for refused[0]") <= 25, logged[:3000]
