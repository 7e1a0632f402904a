"""SCRAM users through DescribeUserScramCredentials / AlterUserScramCredentials
(confluent-kafka's admin client and a raw client for the error codes) and through the CLI
(`kafkaesque users`); a user made either way authenticates."""

from __future__ import annotations

import hashlib
import os
import pty
import secrets
import select
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
import redis
from kio.schema.errors import ErrorCode

from tests.kafka_client import request
from tests.sasl_client import login
from tests.servers import RedisServer
from tests.wire.certificates import make_certificates
from tests.wire.conftest import REPO, Broker
from tests.wire.secure import Secured, start_secured


@pytest.fixture(scope="module")
def users_module(
    redis_server: RedisServer,
    broker_factory: Callable[..., Broker],
    tmp_path_factory: pytest.TempPathFactory,
) -> Secured:
    redis.Redis.from_url(redis_server.url).flushall()
    certs = make_certificates(tmp_path_factory.mktemp("certs"))
    return start_secured(broker_factory, certs, ("SASL_PLAINTEXT",))


def test_confluent_admin_alters_and_describes(users_module: Secured) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": users_module.address("PLAINTEXT")})
    upserts = [
        UserScramCredentialUpsertion(
            "dora", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"dora-pw"
        ),
        UserScramCredentialUpsertion(
            "dora", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dora-pw2"
        ),
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(30)
    described = admin.describe_user_scram_credentials(["dora"])["dora"].result(30)
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096),
        (ScramMechanism.SCRAM_SHA_512, 8192),
    ]
    with users_module.connect("SASL_PLAINTEXT") as conn:
        assert login(conn, "SCRAM-SHA-512", "dora", "dora-pw").error_code == ErrorCode.none
    with users_module.connect("SASL_PLAINTEXT") as conn:
        assert login(conn, "PLAIN", "dora", "dora-pw").error_code == ErrorCode.none
    deletion = UserScramCredentialDeletion("dora", ScramMechanism.SCRAM_SHA_512)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        future.result(30)
    with users_module.connect("SASL_PLAINTEXT") as conn:  # PLAIN falls back to SHA-256's
        assert login(conn, "PLAIN", "dora", "dora-pw2").error_code == ErrorCode.none
    with pytest.raises(Exception, match="does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(30)


def upsertion(name: str, mechanism: int = 2, iterations: int = 4096) -> dict:
    salt = secrets.token_bytes(16)
    digest = "sha512" if mechanism == 2 else "sha256"
    salted = hashlib.pbkdf2_hmac(digest, b"pw", salt, max(iterations, 1))
    return dict(name=name, mechanism=mechanism, iterations=iterations, salt=salt,
                salted_password=salted)  # fmt: skip


def test_alter_refusals(users_module: Secured) -> None:
    with users_module.connect("PLAINTEXT") as conn:
        answer = conn.request(
            request(
                51,
                0,
                deletions=[{"name": "ghost", "mechanism": 2}, {"name": "twice", "mechanism": 1}],
                upsertions=[
                    upsertion("few", iterations=4095),
                    upsertion("many", iterations=16385),
                    upsertion("odd", mechanism=7),
                    upsertion("twice", mechanism=1),
                    upsertion(""),
                    upsertion("fine"),
                ],
            )
        )
        codes = {r.user: r.error_code for r in answer.results}
        assert codes == {
            "ghost": ErrorCode.resource_not_found,
            "twice": ErrorCode.duplicate_resource,
            "few": ErrorCode.unacceptable_credential,
            "many": ErrorCode.unacceptable_credential,
            "odd": ErrorCode.unsupported_sasl_mechanism,
            "": ErrorCode.unacceptable_credential,
            "fine": ErrorCode.none,
        }
        described = conn.request(
            request(50, 0, users=[{"name": "fine"}, {"name": "few"}, {"name": "fine"}])
        )
        codes = {r.user: r.error_code for r in described.results}
        assert codes == {"fine": ErrorCode.duplicate_resource, "few": ErrorCode.resource_not_found}
        everyone = conn.request(request(50, 0, users=None))
        listed = {r.user: [(i.mechanism, i.iterations) for i in r.credential_infos]
                  for r in everyone.results}  # fmt: skip
        assert listed["fine"] == [(2, 4096)]
        assert not {"ghost", "few", "many", "odd", "twice", ""} & listed.keys()


def run_cli(broker: Broker, *args: str, input: bytes | None = None, env: dict | None = None):
    command = [sys.executable, "-m", "kafkaesque", *broker.global_args, *args]
    return subprocess.run(
        command,
        cwd=REPO,
        env={**broker.env, **(env or {})},
        input=input,
        capture_output=True,
        timeout=60,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


def test_cli_users(users_module: Secured) -> None:
    broker = users_module.broker
    added = run_cli(broker, "users", "add", "erin", "--password-env", "PW", env={"PW": "erin-pw"})
    assert added.returncode == 0, added.stderr
    added = run_cli(
        broker, "users", "add", "erin", "--mechanism", "scram-sha-256", "--iterations", "5000",
        "--password-stdin", input=b"erin-pw\n",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    listed = run_cli(broker, "users", "list").stdout.decode()
    rows = [line.split() for line in listed.splitlines()]
    assert rows[0] == ["USER", "MECHANISM", "ITERATIONS"]
    assert ["erin", "SCRAM-SHA-256", "5000"] in rows
    assert ["erin", "SCRAM-SHA-512", "4096"] in rows
    assert "erin-pw" not in listed
    stored = redis.Redis.from_url(broker.redis_url).hgetall("ks:scram")
    assert not any(b"erin-pw" in v for v in stored.values())
    with users_module.connect("SASL_PLAINTEXT") as conn:
        assert login(conn, "SCRAM-SHA-256", "erin", "erin-pw").error_code == ErrorCode.none
    deleted = run_cli(broker, "users", "delete", "erin", "--mechanism", "SCRAM-SHA-256")
    assert deleted.returncode == 0 and "deleted SCRAM-SHA-256" in deleted.stdout.decode()
    assert run_cli(broker, "users", "delete", "erin").returncode == 0
    listed = run_cli(broker, "users", "list")
    assert "erin" not in listed.stdout.decode()


@pytest.mark.parametrize(
    "args,env,input,message,code",
    [
        (["delete", "nobody"], {}, None, "does not exist: nobody", 1),
        (["add", "x", "--password-env", "NOPE"], {}, None, "NOPE is not set", 1),
        (["add", "x", "--password-stdin"], {}, b"\n", "must not be empty", 1),
        (["add", "x", "--iterations", "10", "--password-stdin"], {}, b"p\n", "4096<=x", 2),
        (["add", "x", "--mechanism", "MD5", "--password-stdin"], {}, b"p\n", "MD5", 2),
        (
            ["add", "x", "--password-stdin", "--password-env", "P"],
            {"P": "p"},
            b"p\n",
            "exclude each other",
            2,
        ),
        (["add", "x"], {}, b"pw\npw\n", "no terminal to ask for the password", 1),
    ],
)
def test_cli_users_refusals(users_module: Secured, args, env, input, message, code) -> None:
    result = run_cli(users_module.broker, "users", *args, input=input, env=env)
    err = result.stderr.decode()
    assert result.returncode == code, err
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def read_until(fd: int, wanted: bytes, seen: bytearray, timeout: float = 30.0) -> None:
    """Read the terminal into ``seen`` until ``wanted`` shows up after what was seen."""
    start = len(seen)
    deadline = time.monotonic() + timeout
    while wanted not in seen[start:]:
        assert time.monotonic() < deadline, f"no {wanted!r} in {bytes(seen)!r}"
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen += os.read(fd, 1024)
            except OSError:  # the child closed the terminal
                break


def test_the_password_prompt_asks_twice(users_module: Secured) -> None:
    """On a terminal (a pseudo-terminal here): the password twice, not echoed; two that
    differ are asked again."""
    command = [sys.executable, "-m", "kafkaesque", *users_module.broker.global_args]
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [*command, "users", "add", "fay"],
        cwd=REPO,
        env=users_module.broker.env,
        stdin=child,
        stdout=child,
        stderr=child,
        start_new_session=True,  # no controlling terminal: the prompt uses stdin's
    )
    os.close(child)
    seen = bytearray()
    try:
        # Each answer only once its own prompt is out: getpass turns echo off before it
        # writes the prompt ("Error: ..." also ends in ": ", with echo still on).
        for prompt, answer in [
            (b"Password: ", b"pw-1"),
            (b"confirmation: ", b"pw-2"),
            (b"Password: ", b"pw-1"),
            (b"confirmation: ", b"pw-1"),
        ]:
            read_until(main, prompt, seen)
            os.write(main, answer + b"\n")
        read_until(main, b"credential set", seen)
        assert proc.wait(60) == 0, bytes(seen)
    finally:
        proc.kill()
        proc.wait()
        os.close(main)
    assert b"do not match" in seen
    assert b"pw-1" not in seen and b"pw-2" not in seen
    with users_module.connect("SASL_PLAINTEXT") as conn:
        assert login(conn, "SCRAM-SHA-512", "fay", "pw-1").error_code == ErrorCode.none
