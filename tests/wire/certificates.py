"""Throwaway certificates for the TLS tests, made with the openssl command: a CA, a server
certificate for 127.0.0.1/localhost and a client certificate, all signed by the CA."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

CLIENT_SUBJECT = "/O=Example/OU=Tests/CN=alice"
CLIENT_PRINCIPAL = "User:CN=alice,OU=Tests,O=Example"  # RFC 2253: last RDN first


@dataclass(frozen=True)
class Certificates:
    directory: Path

    def path(self, name: str) -> str:
        return str(self.directory / name)

    @property
    def ca(self) -> str:
        return self.path("ca.pem")

    @property
    def server_cert(self) -> str:
        return self.path("server.pem")

    @property
    def server_key(self) -> str:
        return self.path("server.key")

    @property
    def client_cert(self) -> str:
        return self.path("client.pem")

    @property
    def client_key(self) -> str:
        return self.path("client.key")


# P-256 keys: made at once, where an RSA key takes up to seconds on a loaded machine; every
# client and server the tests use speaks ECDSA.
NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(directory: Path) -> Certificates:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    directory.mkdir(parents=True, exist_ok=True)
    days = ("-days", "2")
    _openssl("req", "-x509", *NEW_KEY, "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-subj", "/CN=kafkaesque test CA", *days, cwd=directory)  # fmt: skip
    (directory / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    )
    (directory / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subject in (("server", "/CN=localhost"), ("client", CLIENT_SUBJECT)):
        _openssl("req", *NEW_KEY, "-nodes", "-keyout", f"{name}.key", "-out",
                 f"{name}.csr", "-subj", subject, cwd=directory)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-extfile", f"{name}.ext", *days,
                 cwd=directory)  # fmt: skip
    return Certificates(directory)
