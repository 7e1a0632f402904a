"""Who may see and change what: sessions (a cookie naming one), the login against the
broker's SCRAM credentials (``kafkaesque users``), the CSRF token every change must carry,
and the ACLs (``kafkaesque acls``) deciding what a logged-in user sees and may do.

Without SASL users on the broker there is no login: everyone sees everything (the
console listens on loopback unless told otherwise). With users, every page but the login
asks for one, and a user sees a topic or a group only if the ACLs let it DESCRIBE it, as
Kafka's Metadata and ListGroups answer; changes (admin mode) need the operation Kafka's
own API would: ALTER_CONFIGS on a topic to edit it, DELETE to delete it, CREATE to create
it, WRITE to produce, READ on the group and its topics to reset offsets, ALTER on the
cluster to change users and ACLs. Super users (``--super-user``) may do everything."""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from kafkaesque.errors import KafkaesqueError
from kafkaesque.hot.log import Log
from kafkaesque.security.acls import Operation, ResourceType
from kafkaesque.security.authorizer import Authorizer

COOKIE = "kafkaesque_console"
CLUSTER_NAME = "kafka-cluster"  # Kafka's one CLUSTER resource
SESSION_SECONDS = 8 * 3600  # a session idle this long logs out
MAX_SESSIONS = 10_000  # the oldest go first beyond this
USERS_CACHE_SECONDS = 2.0  # how long "the broker has users" is believed
FAILED_LOGIN_DELAY = 0.5  # seconds before a refused login is answered (slows guessing)


@dataclass
class Session:
    """One browser's session: its CSRF token and, once logged in, its user."""

    id: str
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    user: str | None = None
    seen: float = field(default_factory=time.monotonic)


class Access:
    """Sessions, logins and ACL checks of one console."""

    def __init__(self, log: Log, super_users: tuple[str, ...] = ()) -> None:
        self.log = log
        self.authorizer = Authorizer(log.stores.acls, super_users)
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self._users_checked = -1e9
        self._has_users = False
        self._acls_checked = -1e9

    # -- sessions -------------------------------------------------------------------------
    def session(self, cookie: str | None) -> tuple[Session, bool]:
        """The session the cookie names, else a new one (True: set the cookie)."""
        now = time.monotonic()
        found = self.sessions.get(cookie or "")
        if found is not None and now - found.seen < SESSION_SECONDS:
            found.seen = now
            self.sessions.move_to_end(found.id)
            return found, False
        if found is not None:
            del self.sessions[found.id]
        created = Session(secrets.token_urlsafe(24))
        self.sessions[created.id] = created
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
        return created, True

    def renew(self, session: Session, user: str | None) -> Session:
        """A new session for a login or logout: a cookie known before it (a fixation)
        never becomes a logged-in one."""
        self.sessions.pop(session.id, None)
        created = Session(secrets.token_urlsafe(24), user=user)
        self.sessions[created.id] = created
        return created

    @staticmethod
    def csrf_ok(session: Session, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(session.csrf.encode(), token.encode())

    # -- logins ---------------------------------------------------------------------------
    async def login_required(self) -> bool:
        """Whether the broker has SASL users (then every page needs a login)."""
        now = time.monotonic()
        if now - self._users_checked > USERS_CACHE_SECONDS:
            self._has_users = bool(await self.log.stores.credentials.users())
            self._users_checked = now
        return self._has_users

    async def check_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is the user's, under any of its SCRAM credentials (as the
        broker's PLAIN checks it; PBKDF2 in a thread). A refusal is answered late."""
        try:
            credentials = await self.log.stores.credentials.describe(user)
        except KafkaesqueError:  # no such user, or an empty name
            credentials = []
        for credential in credentials:
            if await asyncio.to_thread(credential.verify_password, password):
                return True
        await asyncio.sleep(FAILED_LOGIN_DELAY)
        return False

    # -- ACLs -----------------------------------------------------------------------------
    async def refresh(self) -> None:
        """Read the ACLs again if they changed (at most once a second)."""
        now = time.monotonic()
        if now - self._acls_checked >= 1.0:
            await self.authorizer.refresh()
            self._acls_checked = now

    def may(
        self,
        user: str | None,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """May the session's user do this? Without a login (no users) everyone may."""
        if user is None:
            return True
        return self.authorizer.authorize(f"User:{user}", host, operation, resource_type, name)
