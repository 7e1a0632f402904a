"""SASL on a connection (Kafka's SaslServerAuthenticator): the handshake picks a mechanism,
then tokens go back and forth (in SaslAuthenticate requests, or raw after a v0 handshake)
until the client is authenticated or refused. PLAIN and SCRAM-SHA-256/512 (KIP-84), and
re-authentication with a session lifetime (KIP-368)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from kafkaesque.errors import (
    AuthenticationFailed,
    IllegalSaslState,
    KafkaesqueError,
    UnsupportedSaslMechanism,
)
from kafkaesque.hot.credentials import CredentialStore
from kafkaesque.log_throttle import LogThrottle, clip
from kafkaesque.security.scram import (
    MECHANISMS,
    PLAIN,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramExchange,
    parse_client_first,
    parse_plain,
)
from wire.protocol.codec import DropConnection

log = logging.getLogger(__name__)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
# What a client may send before it is authenticated (Kafka closes on anything else).
BEFORE_AUTHENTICATION = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
# Kafka's sasl.server.max.receive.size: the largest frame before authentication.
MAX_RECEIVE_SIZE = 524_288


@dataclass(slots=True)
class SaslSettings:
    """The broker's SASL settings (serve options)."""

    mechanisms: tuple[str, ...]
    reauth_ms: int = 0  # connections.max.reauth.ms; 0: sessions never expire
    failure_delay_ms: int = 100  # connection.failed.authentication.delay.ms


class SaslState:
    """One connection's authentication on a SASL listener."""

    def __init__(
        self,
        settings: SaslSettings,
        credentials: CredentialStore,
        peer: str,
        throttle: LogThrottle | None = None,
    ) -> None:
        self.settings = settings
        # Failures are the client's doing, as often as it likes: one line per kind, then
        # a count (the server's throttle, shared by its connections).
        self.throttle = throttle or LogThrottle(log)
        self.credentials = credentials
        self.peer = peer
        self.mechanism: str | None = None  # chosen by the handshake, until authenticated
        self.raw_tokens = False  # after a v0 handshake: the next frames are bare tokens
        self.user: str | None = None  # the authenticated user
        self.expires: float | None = None  # monotonic end of the session (re-auth on)
        self.failed = False  # the connection closes after this response
        self._exchange: ScramExchange | None = None
        self._attempt_user: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.user is not None and self.mechanism is None

    def check_request(self, api_key: int) -> None:
        """Refuse (close the connection) a request this connection may not send now."""
        if api_key in BEFORE_AUTHENTICATION:
            return
        if self.user is None or self.mechanism is not None:
            raise DropConnection(f"api key {api_key} before SASL authentication completed")
        if self.expires is not None and time.monotonic() > self.expires:
            raise DropConnection(f"SASL session of user {self.user!r} expired (re-authenticate)")

    def handshake(self, mechanism: str, raw_tokens: bool) -> None:
        """SaslHandshake: choose the mechanism (again, for a re-authentication)."""
        if self.mechanism is not None:
            raise self._refuse(IllegalSaslState("SaslHandshake while a handshake is in progress"))
        if mechanism not in self.settings.mechanisms:
            raise self._refuse(
                UnsupportedSaslMechanism(
                    f"Unsupported SASL mechanism {mechanism}; enabled: "
                    + ", ".join(self.settings.mechanisms)
                )
            )
        self.mechanism = mechanism
        self.raw_tokens = raw_tokens
        self._exchange = None

    async def authenticate(self, token: bytes) -> tuple[bytes, int]:
        """One SaslAuthenticate token: the server's answer and the session lifetime (ms, 0
        while unfinished or without re-authentication). AuthenticationFailed, after the
        failure delay, for a refusal: the connection then closes."""
        if self.mechanism is None:
            raise self._refuse(IllegalSaslState("SaslAuthenticate without a SaslHandshake"))
        try:
            answer, user = await self._step(self.mechanism, token)
        except AuthenticationFailed as exc:
            self.failed = True
            who = self._attempt_user
            self.throttle.client(
                ("sasl-failed", self.mechanism),
                logging.WARNING,
                f"authentications failed with {self.mechanism}",
                "authentication failed from %s: user %s, mechanism %s: %s",
                self.peer,
                clip(repr(who)),
                self.mechanism,
                clip(exc),
                logger=log,
            )
            await asyncio.sleep(self.settings.failure_delay_ms / 1000)
            raise AuthenticationFailed(
                "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism}"
            ) from None
        if user is None:
            return answer, 0
        if self.user is not None and user != self.user:
            raise self._refuse(
                AuthenticationFailed("Cannot change principals during re-authentication")
            )
        self.user, self.mechanism, self.raw_tokens = user, None, False
        lifetime = self.settings.reauth_ms
        self.expires = time.monotonic() + lifetime / 1000 if lifetime else None
        return answer, lifetime

    def _refuse(self, error: KafkaesqueError) -> KafkaesqueError:
        """``error``, logged; the connection closes after its answer."""
        self.failed = True
        kind = type(error).__name__
        self.throttle.client(
            kind,
            logging.WARNING,
            f"SASL refusals ({kind})",
            "closing connection from %s: %s",
            self.peer,
            clip(error, 200),
            logger=log,
        )
        return error

    async def _step(self, mechanism: str, token: bytes) -> tuple[bytes, str | None]:
        """(answer, user once authenticated)."""
        if mechanism == PLAIN:
            user, password = parse_plain(token)
            self._attempt_user = user
            for scram in (SCRAM_SHA_512, SCRAM_SHA_256):
                credential = await self.credentials.get(user, scram)
                if credential is not None:
                    # PBKDF2 costs milliseconds: off the event loop
                    ok = await asyncio.to_thread(credential.verify_password, password)
                    if not ok:
                        raise AuthenticationFailed("invalid password")
                    return b"", user
            raise AuthenticationFailed("unknown user")
        if self._exchange is None:
            first = parse_client_first(token)
            self._attempt_user = first.user
            credential = await self.credentials.get(first.user, MECHANISMS[mechanism])
            if credential is None:
                raise AuthenticationFailed("unknown user")
            self._exchange = ScramExchange(first, credential)
            return self._exchange.server_first_message(), None
        exchange, self._exchange = self._exchange, None
        # A user deleted meanwhile fails here too: its credential is read again.
        if await self.credentials.get(exchange.first.user, exchange.credential.mechanism) is None:
            raise AuthenticationFailed("user deleted during authentication")
        return exchange.final(token), exchange.first.user
