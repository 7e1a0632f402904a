"""A TLS file serve cannot use is named in its one-line refusal, with its option: "No such
file or directory" alone left the operator guessing which of three files it was."""

from __future__ import annotations

import os
from pathlib import Path

from tests.cli_in_turn import CommandsInTurn
from tests.wire.certificates import make_certificates

REPO = Path(__file__).resolve().parents[1]


def refusal(cli: CommandsInTurn, *tls_args: str) -> str:
    """serve's one-line refusal of these TLS files, by one CLI process for the test
    (tests/cli_in_turn.py)."""
    command = ["--redis-url", "redis://127.0.0.1:1/0"]
    command += ["serve", "--no-archive", "--listen", "SSL://127.0.0.1:0", *tls_args]
    result = cli.run(*command)
    err = result.stderr.decode()
    assert result.returncode != 0 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_each_tls_file_is_named_with_its_option(tmp_path: Path) -> None:
    with CommandsInTurn(dict(os.environ), REPO) as cli:
        each_tls_file_is_named(cli, tmp_path)


def each_tls_file_is_named(cli: CommandsInTurn, tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    cert, key = certs.server_cert, certs.server_key
    missing = str(tmp_path / "missing.pem")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    err = refusal(cli, "--tls-cert", missing, "--tls-key", key)
    assert f"--tls-cert {missing}: No such file or directory" in err, err
    err = refusal(cli, "--tls-cert", cert, "--tls-key", missing)
    assert f"--tls-key {missing}: No such file or directory" in err, err
    err = refusal(cli, "--tls-cert", cert, "--tls-key", key, "--tls-ca", missing)
    assert f"--tls-ca {missing}: No such file or directory" in err, err
    err = refusal(cli, "--tls-cert", str(garbage), "--tls-key", key)
    assert f"--tls-cert {garbage}" in err, err
    err = refusal(cli, "--tls-cert", cert, "--tls-key", key, "--tls-ca", str(garbage))
    assert f"--tls-ca {garbage}" in err, err
