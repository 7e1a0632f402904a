"""serve's listener, TLS and metrics options: parsed or refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from kafkaesque.cli.serve import listeners_option, metrics_address
from tests.cli_in_turn import CommandsInTurn
from wire.net.security import parse_listener

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cli() -> Iterator[CommandsInTurn]:
    """One CLI process for the module's refusals (tests/cli_in_turn.py): `python -m
    kafkaesque serve` as users run it, without a Python start for each."""
    with CommandsInTurn(dict(os.environ), REPO) as process:
        yield process


def test_a_refusal_is_the_same_by_a_process_of_its_own(cli: CommandsInTurn) -> None:
    args = [
        "--redis-url",
        "redis://127.0.0.1:1/0",
        "serve",
        "--no-archive",
        "--listen",
        "FOO://h:1",
    ]
    alone = subprocess.run(
        [sys.executable, "-m", "kafkaesque", *args],
        cwd=REPO,
        capture_output=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    in_turn = cli.run(*args)
    assert (alone.returncode, alone.stderr) == (in_turn.returncode, in_turn.stderr)
    assert alone.returncode != 0 and b"unknown security protocol 'FOO'" in alone.stderr


def test_listeners() -> None:
    assert parse_listener("127.0.0.1:9092") == ("PLAINTEXT", "127.0.0.1", 9092)
    assert parse_listener("sasl_ssl://[::1]:9093") == ("SASL_SSL", "::1", 9093)
    assert listeners_option(None, None, ("SSL://:9094", "h:1")) == [  # type: ignore[arg-type]
        ("SSL", "0.0.0.0", 9094),
        ("PLAINTEXT", "h", 1),
    ]
    for bad in ("KERBEROS://h:1", "h", "SSL://h:65536", "h:x"):
        with pytest.raises(ValueError):
            parse_listener(bad)
    with pytest.raises(click.BadParameter, match="two SSL listeners"):
        listeners_option(None, None, ("SSL://a:1", "SSL://b:2"))  # type: ignore[arg-type]


def test_metrics_bind_to_loopback_unless_a_host_is_given() -> None:
    assert metrics_address(None, None, "9100") == ("127.0.0.1", 9100)  # type: ignore[arg-type]
    assert metrics_address(None, None, ":9100") == ("127.0.0.1", 9100)  # type: ignore[arg-type]
    assert metrics_address(None, None, "0.0.0.0:9100") == ("0.0.0.0", 9100)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--listen", "SSL://127.0.0.1:0"], "need --tls-cert and --tls-key"),
        (["--listen", "FOO://127.0.0.1:0"], "unknown security protocol 'FOO'"),
        (["--advertised-listener", "SSL://h:1"], "no --listen for SSL"),
        (["--sasl-enabled-mechanisms", "GSSAPI"], "expected some of PLAIN"),
        (["--config", "connections.max.reauth.ms=-1"], "connections.max.reauth.ms: below 0"),
        (  # an option and a --config for one setting that disagree: which was meant?
            ["--min-insync-replicas", "2", "--config", "min.insync.replicas=3"],
            "--min-insync-replicas 2 and --config min.insync.replicas=3 disagree",
        ),
        (
            [
                "--config",
                "group.min.session.timeout.ms=7000",
                "--group-min-session-timeout-ms",
                "6000",
            ],
            "--group-min-session-timeout-ms 6000 and --config group.min.session.timeout.ms=7000",
        ),
        (
            ["--listen", "SSL://127.0.0.1:0", "--tls-cert", "/nonexistent.pem", "--tls-key", "/x"],
            "No such file or directory",
        ),
    ],
)
def test_refusals(cli: CommandsInTurn, args: list[str], message: str) -> None:
    result = cli.run("--redis-url", "redis://127.0.0.1:1/0", "serve", "--no-archive", *args)
    err = result.stderr.decode()
    assert result.returncode != 0 and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
