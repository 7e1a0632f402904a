"""The broker's shared state: the log, its partition layer, the group coordinator."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from kafkaesque.clock import SYSTEM, Clock
from kafkaesque.config.broker_settings import BY_NAME, SETTINGS, default
from kafkaesque.config.topic_keys import BROKER_SYNONYMS, UNIT_SYNONYMS, Kind, broker_defaults
from kafkaesque.errors import InvalidConfig
from kafkaesque.groups.consumer import ConsumerGroupCoordinator
from kafkaesque.groups.consumer_state import ConsumerGroupConfig
from kafkaesque.groups.coordinator import CoordinatorConfig, GroupCoordinator
from kafkaesque.groups.share.config import ShareGroupConfig
from kafkaesque.groups.share.coordinator import ShareGroupCoordinator
from kafkaesque.groups.share.fetch import ShareFetcher
from kafkaesque.hot.compaction import Compactor
from kafkaesque.hot.high_watermark import HighWatermarks
from kafkaesque.hot.log import Log
from kafkaesque.hot.outage import REDIS, REDIS_CONNECTION_ERRORS, background_step
from kafkaesque.hot.registry import BrokerInfo, Registry
from kafkaesque.partition.layer import MAX_MESSAGE_BYTES, Partitions
from kafkaesque.partition.leadership import Leadership
from kafkaesque.partition.read_types import ReadCache
from kafkaesque.partition.topic_ids import TopicIds
from kafkaesque.security.authorizer import Authorizer
from kafkaesque.security.scram import SASL_MECHANISMS
from kafkaesque.tasks import cancel_and_wait
from kafkaesque.txn.coordinator import TransactionCoordinator
from kafkaesque.txn.transaction import TxnConfig
from wire.fetch.sessions import DEFAULT_EVICTION_MS, FetchSessionCache
from wire.topic_configs import topic_defaults

log = logging.getLogger(__name__)


@dataclass(slots=True)
class BrokerConfig:
    host: str = "127.0.0.1"  # advertised host: an IPv4 literal, see README
    port: int = 9092
    node_id: int = 0
    # Without an id given (serve without --node-id): node_id if free, else one assigned.
    assign_node_id: bool = False
    # KRaft's broker session: a broker not heard of for session_timeout_ms is gone and
    # its partitions move; it heartbeats every heartbeat_interval_ms.
    session_timeout_ms: int = default("broker.session.timeout.ms")
    heartbeat_interval_ms: int = default("broker.heartbeat.interval.ms")
    auto_create_topics: bool = default("auto.create.topics.enable")
    default_partitions: int = default("num.partitions")
    max_message_bytes: int = MAX_MESSAGE_BYTES
    connections_max_idle_ms: int = default("connections.max.idle.ms")
    # Kafka's socket.request.max.bytes: a larger request closes its connection.
    socket_request_max_bytes: int = default("socket.request.max.bytes")
    # Kafka's queued.max.request.bytes (unbounded there): bytes of requests being read or
    # handled across connections; beyond it connections wait, which bounds the memory.
    queued_max_request_bytes: int = default("queued.max.request.bytes")
    request_timeout_ms: int = 30_000  # a request sent in part, then stalled this long, closes
    max_connections: int | None = None  # Kafka's max.connections; None: no limit
    max_connections_per_ip: int | None = None  # Kafka's max.connections.per.ip
    # Kafka's min.insync.replicas: copies acks=all waits for, Redis itself counted (so
    # 1 waits for no replica: only the AOF fsync).
    min_insync_replicas: int = default("min.insync.replicas")
    groups: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    # The consumer group protocol's (KIP-848) session timeout and heartbeat interval.
    consumer_groups: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
    # Share groups' (KIP-932) group.share.* configs.
    share_groups: ShareGroupConfig = field(default_factory=ShareGroupConfig)
    # Seconds between compaction passes over compact topics (Kafka's log cleaner); 0: none.
    compaction_interval: float = 5.0
    # Every topic's config defaults (topic config name -> value), from ``serve --config``.
    topic_defaults: dict[str, str] = field(default_factory=dict)
    # Kafka's authorizer.class.name: "acl" checks every request against the ACLs
    # (kafkaesque/security/acls.py); "" (the default) lets every client do everything.
    authorizer: str = ""
    super_users: tuple[str, ...] = ()  # Kafka's super.users: pass every check
    allow_everyone_if_no_acl_found: bool = default("allow.everyone.if.no.acl.found")
    # The transaction coordinator's configs (Kafka's names and defaults).
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3_600_000
    transaction_abort_interval_ms: int = 10_000

    def transactions(self) -> TxnConfig:
        return TxnConfig(
            self.transaction_max_timeout_ms,
            self.transactional_id_expiration_ms,
            self.transaction_abort_interval_ms,
        )

    # Listener name (PLAINTEXT, SASL_SSL, ...) -> the (host, port) Metadata gives clients
    # that came in on it; a listener not named here advertises ``host`` and ``port``.
    advertised_listeners: dict[str, tuple[str, int]] = field(default_factory=dict)
    sasl_mechanisms: tuple[str, ...] = SASL_MECHANISMS  # sasl.enabled.mechanisms
    connections_max_reauth_ms: int = default("connections.max.reauth.ms")  # KIP-368
    failed_authentication_delay_ms: int = default("connection.failed.authentication.delay.ms")
    # Incremental fetch sessions (KIP-227): Kafka's max.incremental.fetch.session.cache.slots
    # (0: none, every fetch is a full one) and min.incremental.fetch.session.eviction.ms.
    fetch_session_slots: int = default("max.incremental.fetch.session.cache.slots")
    fetch_session_eviction_ms: int = DEFAULT_EVICTION_MS

    def endpoint(self, listener: str) -> tuple[str, int]:
        """The advertised (host, port) of the listener a client came in on."""
        return self.advertised_listeners.get(listener, (self.host, self.port))

    def info(self) -> BrokerInfo:
        """This broker as the registry lists it: its advertised endpoints."""
        return BrokerInfo(
            self.node_id, dict(self.advertised_listeners) or {"PLAINTEXT": (self.host, self.port)}
        )

    def apply(self, settings: dict[str, str]) -> None:
        """Apply Kafka broker configs (``serve --config``): the broker's own settings
        (kafkaesque/config/broker_settings.py) and every topic's defaults (log.retention.ms, ...);
        raises InvalidConfig naming a bad or unknown one, before changing anything."""
        values: dict[str, object] = {}
        for name, text in settings.items():
            if name in BY_NAME:
                values[name] = BY_NAME[name].parse(text)
            elif name not in BROKER_SYNONYMS and name not in UNIT_SYNONYMS:
                raise InvalidConfig(f"unknown broker config {name!r}")
        defaults = broker_defaults(settings)  # checks the topic defaults
        for name, value in values.items():
            self.set(BY_NAME[name].attribute, value)
        self.topic_defaults = {**self.topic_defaults, **defaults}

    def _owner(self, attribute: str) -> tuple[object, str]:
        """The config holding ``attribute`` (groups.x: the coordinator's), and its name."""
        if attribute.startswith("groups."):
            return self.groups, attribute.removeprefix("groups.")
        if attribute.startswith("consumer_groups."):
            return self.consumer_groups, attribute.removeprefix("consumer_groups.")
        if attribute.startswith("share_groups."):
            return self.share_groups, attribute.removeprefix("share_groups.")
        return self, attribute

    def get(self, attribute: str) -> object:
        owner, name = self._owner(attribute)
        return getattr(owner, name)

    def set(self, attribute: str, value: object) -> None:
        owner, name = self._owner(attribute)
        setattr(owner, name, value)

    def describe(self) -> list[tuple[str, str, Kind, str]]:
        """(name, value, kind, doc) of the broker's own configs, as DescribeConfigs has them."""
        entries = [
            ("broker.id", str(self.node_id), Kind.INT, "this broker's node id"),
            ("advertised.listeners", self.advertised_text(), Kind.STRING, ""),
            ("sasl.enabled.mechanisms", ",".join(self.sasl_mechanisms), Kind.LIST, ""),
        ]
        for setting in SETTINGS:
            value = self.get(setting.attribute)
            text = (
                ""
                if value is None
                else str(value).lower()
                if setting.kind is Kind.BOOLEAN
                else str(value)
            )
            entries.append((setting.name, text, setting.kind, setting.doc))
        return entries

    def advertised_text(self) -> str:
        """advertised.listeners as Kafka writes it: NAME://HOST:PORT,..."""
        listeners = self.advertised_listeners or {"PLAINTEXT": (self.host, self.port)}
        return ",".join(f"{name}://{host}:{port}" for name, (host, port) in listeners.items())


class Broker:
    def __init__(self, log: Log, config: BrokerConfig, clock: Clock = SYSTEM) -> None:
        self.log = log
        self.config = config
        # Sessions, timeouts, expiries and the background loops' intervals are on it.
        self.clock = clock
        self.notifier = log.stores.notifier(log.channel(""))
        self.partitions = Partitions(log, self.notifier, config.max_message_bytes)
        self.topic_ids = TopicIds(log, clock=clock.monotonic)  # requests naming topics by id
        # This process's incremental fetch sessions (KIP-227): they outlive connections.
        self.fetch_sessions = FetchSessionCache(
            config.fetch_session_slots,
            config.fetch_session_eviction_ms,
            read_cache=lambda: ReadCache(self.notifier),
            clock=clock.monotonic,
        )
        self.groups = GroupCoordinator(log, config.groups, clock)
        self.consumer_groups = ConsumerGroupCoordinator(log, config.consumer_groups, clock)
        # Share groups (KIP-932): their coordinator, and acquisition with share sessions.
        self.share_groups = ShareGroupCoordinator(log, config.share_groups, clock)
        self.share_fetcher = ShareFetcher(self.share_groups, self.partitions, clock)
        self.credentials = log.stores.credentials  # SCRAM users
        self.cluster_id = ""
        self.memory = log.stores.memory_guard(log.release_archived)
        self.partitions.memory = self.memory
        self._reaper: asyncio.Task[None] | None = None
        self._memory_watch: asyncio.Task[None] | None = None
        self._compaction: asyncio.Task[None] | None = None
        # Where Redis replicas are required, reads stop at high watermarks it raises.
        self._high_watermarks: asyncio.Task[None] | None = None
        # None: no authorizer, every request is allowed (wire/authorize.py).
        self.authorizer: Authorizer | None = None
        if config.authorizer:
            self.authorizer = Authorizer(
                log.stores.acls,
                config.super_users,
                config.allow_everyone_if_no_acl_found,
            )
        self._acl_refresh: asyncio.Task[None] | None = None
        self.transactions = TransactionCoordinator(
            log, self.partitions, self.groups, config.transactions(), clock=clock
        )
        self._transactions: asyncio.Task[None] | None = None
        # The brokers on this Redis and who leads what (kafkaesque.partition.leadership).
        self.registry = Registry(
            log, config.info(), config.session_timeout_ms, config.heartbeat_interval_ms
        )
        self.leadership = Leadership(log, self.registry)
        self.partitions.leadership = self.leadership
        log.node = str(config.node_id)
        self._heartbeats: asyncio.Task[None] | None = None

    async def join(self) -> None:
        """Register (once listening: the endpoints are known), take up the partitions
        this broker wins, and heartbeat from now on."""
        self.registry.me = self.config.info()
        await self.registry.join(self.config.assign_node_id)
        self.config.node_id = self.registry.me.node_id  # assigned, perhaps
        self.log.node = str(self.config.node_id)
        await self.leadership.reconcile()
        loop = asyncio.get_running_loop()

        async def after(announced: bool) -> None:
            await self.leadership.on_heartbeat(announced, loop.time())

        self._heartbeats = asyncio.create_task(self.registry.run(after), name="heartbeats")

    async def leave(self) -> None:
        """A graceful stop: hand this broker's partitions over and deregister, so the
        others take over at once."""
        if self._heartbeats is None:
            return
        await cancel_and_wait(self._heartbeats)
        self._heartbeats = None
        try:
            moved = await self.leadership.hand_over()
            await self.registry.deregister()
        except REDIS_CONNECTION_ERRORS as exc:  # the others take over after the timeout
            if not REDIS.stopped():  # stopped for good: the exit says so, once
                log.warning("could not hand partitions over: %s", exc)
        else:
            if moved:
                log.info("handed %d partitions over", moved)

    async def start(self) -> None:
        self.cluster_id = await self.log.stores.cluster_id()
        # This broker's --config under the dynamic broker configs others set meanwhile
        # (AlterConfigs on a broker or the cluster default, stored in Redis).
        changed = await self.log.set_topic_defaults(await topic_defaults(self))
        if changed:
            log.info("topic defaults changed for: %s", ", ".join(changed))
        durability, promise = await self.log.stores.durability(self.config.min_insync_replicas)
        self.partitions.durability = durability
        log.info("acks=all: %s", promise)
        if durability.replicas:
            # Consumers see a record only once the replicas acks=all waits for have it.
            watermarks = HighWatermarks(self.log, durability.replicas, clock=self.clock)
            watermarks.attach()
            self._high_watermarks = asyncio.create_task(watermarks.run(), name="high watermarks")
        await self.memory.start()
        if self.authorizer is not None:
            await self.authorizer.refresh()  # no request is served before the ACLs are read
            self._acl_refresh = asyncio.create_task(self.authorizer.run(), name="acl refresh")
        self._memory_watch = asyncio.create_task(self.memory.watch(), name="memory watch")
        self.notifier.start()
        self.groups.start()
        self._reaper = asyncio.create_task(self._expire_members(), name="group reaper")
        if self.config.compaction_interval > 0:
            compactor = Compactor(self.log, clock=self.clock.now_ms)
            self._compaction = asyncio.create_task(
                compactor.run_forever(self.config.compaction_interval), name="compaction"
            )
        self._transactions = asyncio.create_task(
            self.transactions.completion.run_forever(), name="transaction timeouts"
        )

    def closing(self) -> None:
        """Shutting down: waiting fetches and group requests answer now."""
        self.notifier.close()
        self.groups.notifier.close()

    async def stop(self) -> None:
        await self.leave()
        tasks = (self._reaper, self._memory_watch, self._compaction, self._acl_refresh)
        for task in (*tasks, self._transactions, self._high_watermarks):
            if task is not None:
                await cancel_and_wait(task)
        self.fetch_sessions.close()
        self.consumer_groups.close()  # its session timers
        self.share_groups.close()
        await self.share_fetcher.close()
        await self.notifier.stop()
        await self.groups.stop()

    async def _expire_members(self) -> None:
        """Expire group members whose sessions timed out, and close join rounds past their
        deadline; every broker on the Redis does it, the group lock keeps it single. On a
        Redis Cluster, also finish topic operations a crashed broker left half-done."""
        ticks = 0
        while True:
            await self.clock.sleep(0.5)
            with background_step("expiring group members", log):
                # Every group at the start and once a minute, else those with members.
                await self.groups.tick_all(sweep=ticks % 120 == 0)
                await self.consumer_groups.tick_all()
                await self.share_groups.tick_all()
                if ticks % 10 == 0:  # topic operations a crashed broker left half-done
                    for marker in await self.log.finish_steps():
                        log.info("finished a topic operation left half-done: %s", marker)
                ticks += 1
