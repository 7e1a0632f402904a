"""The brokers sharing one Redis: each registers, heartbeats and is forgotten when it stops
heartbeating for a session timeout, as KRaft's broker sessions.

The registry is three keys (``Keys.brokers``, ``brokers_alive``, ``membership``) and the
scripts register.lua, heartbeat.lua and deregister.lua; the number in ``membership``
grows with every join, leave or expiry and is published, so every broker hears of a
change at once and recomputes who leads what (kafkaesque.partition.leadership).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgpack

from kafkaesque.errors import DuplicateBroker, UnknownSession
from kafkaesque.hot.keys import Keys
from kafkaesque.hot.log import Log
from kafkaesque.hot.notify import Notifier
from kafkaesque.hot.outage import background_step

log = logging.getLogger(__name__)

SESSION_TIMEOUT_MS = 9_000  # KRaft's broker.session.timeout.ms
HEARTBEAT_INTERVAL_MS = 2_000  # KRaft's broker.heartbeat.interval.ms
FIRST_ASSIGNED_ID = 1000  # assigned node ids start here (Kafka's reserved.broker.max.id)


def registry_keys(keys: Keys) -> list[str]:
    """The KEYS of the registry's scripts (brokers.lua)."""
    return [keys.brokers, keys.brokers_alive, keys.membership, keys.brokers_sequence]


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker as clients reach it: its advertised (host, port) per listener name."""

    node_id: int
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)
    rack: str | None = None

    @property
    def address(self) -> str:
        """Where it serves, for telling two processes with one node id apart."""
        return ",".join(f"{n}://{h}:{p}" for n, (h, p) in sorted(self.endpoints.items()))

    def packed(self) -> bytes:
        endpoints = [[name, host, port] for name, (host, port) in self.endpoints.items()]
        return msgpack.packb({"endpoints": endpoints, "rack": self.rack})

    @classmethod
    def unpacked(cls, node_id: int, value: bytes) -> BrokerInfo:
        """From the registry's value, "token\\naddress\\n" + packed()."""
        entry = msgpack.unpackb(value.split(b"\n", 2)[2])
        endpoints = {name: (host, port) for name, host, port in entry["endpoints"]}
        return cls(node_id, endpoints, entry.get("rack"))


class Registry:
    """This broker's registration, and the live brokers as last heard.

    ``live`` always holds this broker. A second live process with the same node id at
    another address is refused registration (Kafka's DUPLICATE_BROKER_REGISTRATION); the
    broker then serves unregistered, as the node whose id it has, and logs it."""

    def __init__(
        self,
        log_: Log,
        me: BrokerInfo,
        session_ms: int = SESSION_TIMEOUT_MS,
        heartbeat_ms: int = HEARTBEAT_INTERVAL_MS,
    ) -> None:
        self.log = log_
        self.me = me
        self.session_ms = session_ms
        self.heartbeat_ms = heartbeat_ms
        self.token = uuid.uuid4().hex  # tells this process from a restart of it
        self.live: dict[int, BrokerInfo] = {me.node_id: me}
        self.membership = -1
        self.registered = False
        keys = log_.keys
        self._keys = registry_keys(keys)
        self._channel = keys.membership_channel
        self._events = Notifier(log_.redis, self._channel)
        self._wake = asyncio.Event()
        self._duplicate_logged = False

    @property
    def nodes(self) -> list[int]:
        return sorted(self.live)

    async def register(self) -> None:
        """Join; refused (DuplicateBroker) while another live process has the node id."""
        reply = await self.log.scripts.register(
            self._keys,
            [
                self.me.node_id,
                self.token,
                self.me.address,
                self.me.packed(),
                self.session_ms,
                self._channel,
            ],
        )
        self.registered = True
        self._duplicate_logged = False
        self._update(reply)

    async def join(self, assign: bool) -> None:
        """Register; with ``assign``, when this node id is taken by a live broker at
        another address, take the next free id instead (1000 and up, above the ids people
        give, as Kafka's broker.id generation) and register as that."""
        try:
            await self.register()
        except DuplicateBroker:
            if not assign:
                await self.heartbeat()  # logs it, and serves unregistered
                return
            node = int(await self.log.redis.incr(self.log.keys.next_node_id))
            if node < FIRST_ASSIGNED_ID:  # the counter starts above the ids people give
                node = await self.log.redis.incrby(
                    self.log.keys.next_node_id, FIRST_ASSIGNED_ID - node
                )
            log.info("node id %d is taken: this broker is node %d", self.me.node_id, node)
            self.me = dataclasses.replace(self.me, node_id=int(node))
            self.live = {self.me.node_id: self.me}
            await self.register()

    async def heartbeat(self) -> None:
        """Renew the session (registering again if it was lost) and read the members."""
        if not self.registered:
            try:
                await self.register()
            except DuplicateBroker as exc:
                if not self._duplicate_logged:
                    log.warning("%s: serving unregistered, as node %d", exc, self.me.node_id)
                    self._duplicate_logged = True
                self.live = {self.me.node_id: self.me}
            return
        try:
            reply = await self.log.scripts.heartbeat(
                self._keys,
                [
                    self.me.node_id,
                    self.token,
                    self.session_ms,
                    self._channel,
                    self.log.highest_sequence,
                ],
            )
        except UnknownSession:  # expired while stalled, or Redis lost its data
            log.warning("broker %d's registration was lost: registering again", self.me.node_id)
            self.registered = False
            await self.heartbeat()
            return
        self._update(reply)

    def _update(self, reply: list[object]) -> None:
        membership, _now, highest, *pairs = reply
        # On a cluster, this broker's next appends get ids above every broker's last
        # reported ones (docs/scale-out.md 3.6 (4)).
        self.log.highest_sequence = max(self.log.highest_sequence, int(highest))  # type: ignore[call-overload]
        live = {self.me.node_id: self.me}
        for i in range(0, len(pairs), 2):
            node = int(pairs[i])  # type: ignore[call-overload]
            if node != self.me.node_id:
                live[node] = BrokerInfo.unpacked(node, pairs[i + 1])  # type: ignore[arg-type]
        if int(membership) != self.membership:  # type: ignore[call-overload]
            joined, left = set(live) - set(self.live), set(self.live) - set(live)
            if self.membership < 0:  # this broker just joined
                log.info("brokers: %s", ", ".join(map(str, sorted(live))))
            elif joined or left:
                log.info(
                    "brokers: %s%s%s",
                    ", ".join(map(str, sorted(live))),
                    f" (joined: {', '.join(map(str, sorted(joined)))})" if joined else "",
                    f" (left: {', '.join(map(str, sorted(left)))})" if left else "",
                )
        self.membership = int(membership)  # type: ignore[call-overload]
        self.live = live

    def changed(self) -> None:
        """Something moved (a membership or leadership message): heartbeat now."""
        self._wake.set()

    async def run(self, on_heartbeat: Callable[[bool], Awaitable[None]]) -> None:
        """Heartbeat every interval, and at once when a change is announced; after each,
        ``on_heartbeat(announced)``."""
        self._events.watch({""}, lambda _key, _message: self._wake.set())
        self._events.start()
        try:
            while True:
                announced = False
                try:
                    async with asyncio.timeout(self.heartbeat_ms / 1000):
                        await self._wake.wait()
                        announced = True
                except TimeoutError:
                    pass
                self._wake.clear()
                with background_step("broker heartbeat", log):
                    await self.heartbeat()
                    await on_heartbeat(announced)
        finally:
            await self._events.stop()

    async def announce(self) -> None:
        """Tell every broker to look again (partitions' leaders moved)."""
        await self.log.redis.publish(self._channel, "leaders")

    async def deregister(self) -> None:
        """Leave at once (a graceful stop), instead of after the session timeout."""
        if self.registered:
            await self.log.scripts.deregister(
                self._keys, [self.me.node_id, self.token, self._channel]
            )
            self.registered = False


async def registered(log_: Log) -> list[tuple[BrokerInfo, float]]:
    """The brokers whose sessions are running, with the seconds each has left (by
    Redis' clock), by node id; read-only (the brokers' heartbeats expire the others)."""
    now, *rows = await log_.scripts.brokers_list(registry_keys(log_.keys), [])
    found = [
        (BrokerInfo.unpacked(int(rows[i]), rows[i + 1]), (int(rows[i + 2]) - now) / 1000)
        for i in range(0, len(rows), 3)
    ]
    return sorted(found, key=lambda item: item[0].node_id)
