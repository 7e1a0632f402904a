"""Listeners as Kafka names them (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), the TLS context
and the principal of a client certificate."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_HANDSHAKE_TIMEOUT = 10.0  # seconds a client gets to finish its TLS handshake


@dataclass(frozen=True, slots=True)
class Listener:
    """One address the broker accepts clients on; its name is its security protocol."""

    name: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.name in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.name.startswith("SASL_")


def parse_listener(text: str) -> tuple[str, str, int]:
    """(protocol, host, port) of "PROTOCOL://HOST:PORT", or of "HOST:PORT" (PLAINTEXT);
    IPv6 hosts in brackets; an empty host means every interface. ValueError if bad."""
    protocol, sep, address = text.partition("://")
    if not sep:
        protocol, address = "PLAINTEXT", text
    protocol = protocol.upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(
            f"unknown security protocol {protocol!r} (one of {', '.join(SECURITY_PROTOCOLS)})"
        )
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"expected [PROTOCOL://]HOST:PORT, got {text!r}")
    return protocol, host.strip("[]"), int(port)


class TlsFileError(ValueError):
    """A TLS file that cannot be read or used: ``which`` ("cert", "key" or "ca") and its
    path, for a message naming both (OpenSSL's "No such file or directory" names neither)."""

    def __init__(self, which: str, path: str, reason: str) -> None:
        super().__init__(f"{which} {path}: {reason}")
        self.which, self.path, self.reason = which, path, reason


def tls_context(cert: str, key: str, ca: str | None = None) -> ssl.SSLContext:
    """The server's TLS context; with ``ca``, clients must present a certificate it
    signed (mutual TLS: Kafka's ssl.client.auth=required). TlsFileError names the file
    that failed."""
    files = {"cert": cert, "key": key, **({"ca": ca} if ca is not None else {})}
    for which, path in files.items():
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise TlsFileError(which, path, exc.strerror or str(exc)) from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as exc:  # either file's content, or a key not the certificate's
        raise TlsFileError("cert", f"{cert} (with key {key})", str(exc)) from None
    if ca is not None:
        try:
            context.load_verify_locations(ca)
        except ssl.SSLError as exc:
            raise TlsFileError("ca", ca, str(exc)) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


# OpenSSL's long attribute names (as ssl.getpeercert gives them) -> RFC 2253's keywords.
_RFC2253_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def distinguished_name(peercert: dict[str, Any]) -> str:
    """The certificate subject as RFC 2253 writes it (Java's X500Principal.getName(), so
    Kafka's default principal): the last RDN first, e.g. "CN=alice,O=Example"."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        rdns.append(
            "+".join(f"{_RFC2253_NAMES.get(name, name)}={_escape(value)}" for name, value in rdn)
        )
    return ",".join(rdns)
