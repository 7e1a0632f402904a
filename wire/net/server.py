"""The asyncio server: connections, framing, in-order responses, dispatch by api key."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import gc
import logging
import resource
import signal
import ssl
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from kafkaesque.hot.log import Log
from kafkaesque.log_throttle import LogThrottle, clip
from kafkaesque.partition.appends import TopicTraffic
from kafkaesque.security.quota_rates import REFRESH_SECONDS, QuotaManager
from kafkaesque.tasks import cancel_and_wait
from wire.broker import Broker, BrokerConfig
from wire.metrics import Metrics
from wire.net.connection import Connection
from wire.net.sasl import SaslSettings, SaslState
from wire.net.security import TLS_HANDSHAKE_TIMEOUT, Listener, distinguished_name
from wire.net.stream import ClientStream
from wire.net.throttling import RequestBudget, Throttling
from wire.protocol.codec import ConnectionState
from wire.topic_metrics import Lag, TrafficCounters

log = logging.getLogger(__name__)

SHUTDOWN_GRACE = 10.0  # seconds in-flight requests get to finish on SIGTERM
# Connections the kernel queues before they are accepted: a burst of clients connecting at
# once is accepted, not left to retry their handshake a second later (asyncio's 100).
LISTEN_BACKLOG = 1024


def raise_open_files_limit() -> None:
    """Raise the soft limit of open files to the hard one: every connection is a file, and
    the usual soft limit (1024) is below what a broker holds."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):  # an unlimited hard limit (macOS)
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# glibc's mallopt parameters.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Buffers up to this size (a produce request of the default 1 MiB, a received chunk of
# 256 KiB, the Redis command that appends its batches) come from the heap, not from an
# mmap of their own; and up to TRIM_ABOVE bytes freed at the heap's top stay with it.
MMAP_ABOVE = 4 << 20
TRIM_ABOVE = 32 << 20


def keep_freed_memory() -> bool:
    """Have glibc's malloc reuse freed request buffers rather than give their pages back
    to the kernel and fault in fresh zeroed ones for the next request: with its defaults,
    every large request and its Redis command was an mmap and munmap (or a trim of the
    heap), and page faults were 13% of the broker's CPU producing (docs/profile.md).
    False where the C library is not glibc (nothing changed)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # musl, macOS: no mallopt
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_ABOVE)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_ABOVE)
    )


class Server:
    def __init__(
        self,
        broker: Broker,
        host: str,
        port: int,
        metrics: Metrics | None = None,
        quota_refresh: float = REFRESH_SECONDS,
        listeners: Sequence[Listener] = (),
        tls: ssl.SSLContext | None = None,
    ):
        self.broker = broker
        # Without listeners: one PLAINTEXT listener on host:port. ``host`` and ``port``
        # are the first listener's (its port once listening, when asked for port 0).
        self.listeners = list(listeners) or [Listener("PLAINTEXT", host, port)]
        self.host = self.listeners[0].host
        self.port = self.listeners[0].port
        self.ports: dict[str, int] = {}  # listener name -> the port it listens on
        self.tls = tls
        if tls is None and any(listener.tls for listener in self.listeners):
            raise ValueError("an SSL or SASL_SSL listener needs a TLS certificate and key")
        config = broker.config
        self.sasl = SaslSettings(
            config.sasl_mechanisms,
            config.connections_max_reauth_ms,
            config.failed_authentication_delay_ms,
        )
        self.metrics = metrics or Metrics()
        self.metrics.watch_memory(lambda: broker.memory.use)
        self.metrics.watch_fetch_sessions(broker.fetch_sessions)
        self.metrics.watch_share_groups(broker.share_fetcher)
        traffic = broker.partitions.traffic = TopicTraffic()  # records, bytes per topic
        self.metrics.registry.register(TrafficCounters(traffic))
        self.budget = RequestBudget(broker.config.queued_max_request_bytes)
        self.throttle = LogThrottle(log)
        self.api_metrics: dict[int, tuple[Any, Any]] = {}  # api key -> its labelled metrics
        # Client quotas (Kafka's KIP-13/KIP-219), re-read from Redis every quota_refresh s.
        self.quotas = QuotaManager(broker.log.stores.quotas, quota_refresh)
        self.throttling = Throttling(self.quotas)
        self._quota_refresh: asyncio.Task[None] | None = None
        self._servers: list[asyncio.Server] = []
        self.idle: dict[ClientStream, bool] = {}  # connection -> waiting for a request
        self._per_ip: Counter[str] = Counter()
        self.stopping = False
        self.stopped = asyncio.Event()  # set at shutdown: ends the mutes of throttled clients
        self.metrics.queued_request_bytes.set_function(
            lambda: self.budget.reserved + self.budget.beside
        )
        self.metrics.waiting_for_memory.set_function(lambda: self.budget.waiting)

    async def start(self) -> None:
        await self.broker.start()
        listener = self.listeners[0]
        loop = asyncio.get_running_loop()
        try:
            for listener in self.listeners:
                serve = functools.partial(self._connection, listener)
                server = await loop.create_server(
                    functools.partial(ClientStream, serve),
                    listener.host,
                    listener.port,
                    backlog=LISTEN_BACKLOG,
                )
                self._servers.append(server)
                self.ports[listener.name] = server.sockets[0].getsockname()[1]
        except OSError as exc:  # the address is taken or not ours: stop what started
            await self._close_listeners()
            await self.broker.stop()
            reason = exc.strerror or str(exc)
            raise OSError(
                exc.errno, f"cannot listen on {listener.host}:{listener.port}: {reason}"
            ) from None
        except BaseException:
            await self._close_listeners()
            await self.broker.stop()
            raise
        self.port = self.ports[self.listeners[0].name]
        advertised = self.broker.config.advertised_listeners
        for name, (host, port) in list(advertised.items()):
            if port == 0 and name in self.ports:  # asked for any port: advertise the one got
                advertised[name] = (host, self.ports[name])
        if self.broker.config.port == 0:
            self.broker.config.port = self.port
        try:
            await self.broker.join()
        except BaseException:
            await self._close_listeners()
            await self.broker.stop()
            raise
        self._quota_refresh = asyncio.create_task(self.quotas.run(), name="quota refresh")

    async def serve(self) -> None:
        """Serve until SIGTERM or SIGINT, then shut down gracefully."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):  # before listening: no window where
            loop.add_signal_handler(sig, stop.set)  # a signal kills a listening broker
        await self.start()
        # What exists now (modules, kio's schemas: ~120,000 objects) lives as long as the
        # process: out of the collector's sight, a full collection no longer walks it
        # (58 ms each, which set the p99 of fetches and produces).
        gc.collect()
        gc.freeze()
        for listener in self.listeners:
            log.info(
                "kafkaesque broker listening on %s://%s:%d",
                listener.name,
                listener.host,
                self.ports[listener.name],
            )
        await stop.wait()
        await self.shutdown()

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish, close connections."""
        self.stopping = True
        self.stopped.set()
        for server in self._servers:
            server.close()
        await self.broker.leave()  # the other brokers take this one's partitions now
        self.broker.closing()  # long-polling fetches and group joins answer now
        for writer, idle in list(self.idle.items()):
            if idle:
                writer.close()
        deadline = time.monotonic() + SHUTDOWN_GRACE
        while self.idle and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for writer in list(self.idle):
            writer.close()
        if self._quota_refresh is not None:
            await cancel_and_wait(self._quota_refresh)
        await self.broker.stop()
        log.info("stopped")

    async def _close_listeners(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()

    async def _start_tls(self, writer: ClientStream, peer: object) -> bool:
        """The TLS handshake of a new connection on an SSL or SASL_SSL listener; a failed
        one (a plaintext client, a bad or missing client certificate) is one log line."""
        assert self.tls is not None  # __init__ refuses a TLS listener without it
        try:
            await writer.start_tls(self.tls, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT)
        except (OSError, TimeoutError, ssl.SSLError, EOFError) as exc:
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            self.throttle.client(
                "tls-handshake",
                logging.WARNING,
                "TLS handshakes failed",
                "closing connection from %s: TLS handshake failed: %s",
                peer,
                clip(reason, 200),
                logger=log,
            )
            self.metrics.errors.labels("tls").inc()
            writer.abort()
            # Closed before the connection is let go (a client that connects and leaves,
            # as a port probe does, leaves no socket behind).
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), TLS_HANDSHAKE_TIMEOUT)
            return False
        return True

    def _refusal(self, ip: str) -> tuple[str, int] | None:
        """The limit (option name, value) that refuses a new connection from ``ip``: Kafka's
        max.connections and max.connections.per.ip; None if it is accepted."""
        config = self.broker.config
        limit = config.max_connections
        if limit is not None and len(self.idle) >= limit:
            return "max-connections", limit
        limit = config.max_connections_per_ip
        if limit is not None and self._per_ip[ip] >= limit:
            return "max-connections-per-ip", limit
        return None

    async def _connection(self, listener: Listener, writer: ClientStream) -> None:
        peer = writer.get_extra_info("peername")
        ip = peer[0] if isinstance(peer, tuple) else ""
        refusal = self._refusal(ip)
        if refusal is not None:  # closed at once, as Kafka does; a burst logs one line
            name, limit = refusal
            self.metrics.refused_connections.labels(name).inc()
            self.throttle.log(
                name,
                logging.WARNING,
                f"connections refused by --{name} {limit}",
                "refusing connection from %s: --%s %d reached",
                peer,
                name,
                limit,
            )
            writer.close()
            return
        if self.quotas.table.ip_active and await self._over_connection_rate(ip, writer):
            return
        if listener.tls and not await self._start_tls(writer, peer):
            return
        connection = ConnectionState(listener=listener.name)
        if listener.sasl:
            connection.sasl = SaslState(
                self.sasl, self.broker.credentials, str(peer), self.throttle
            )
        elif listener.tls:
            certificate = writer.get_extra_info("peercert")
            if certificate:  # mutual TLS: the principal is the certificate's subject
                connection.principal = f"User:{distinguished_name(certificate)}"
        self.idle[writer] = True
        self._per_ip[ip] += 1
        self.metrics.connections.inc()
        self.metrics.connections_total.inc()
        try:
            await Connection(self, listener, connection, writer).run()
        finally:
            self.idle.pop(writer, None)
            self._per_ip[ip] -= 1
            if not self._per_ip[ip]:
                del self._per_ip[ip]
            self.metrics.connections.dec()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _over_connection_rate(self, ip: str, writer: ClientStream) -> bool:
        """Whether a new connection from ``ip`` is over its connection_creation_rate: it is
        then held, unread, for the throttle time and closed, as Kafka's acceptor does."""
        delay_ms = self.quotas.connection_delay_ms(ip)
        if not delay_ms:
            return False
        name = "connection-creation-rate"
        self.metrics.refused_connections.labels(name).inc()
        self.throttle.log(
            name,
            logging.WARNING,
            "connections refused by connection_creation_rate quotas",
            "refusing connection from %s: over its connection_creation_rate quota",
            ip,
        )
        await asyncio.sleep(delay_ms / 1000)
        writer.close()
        return True


Companion = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


async def run(
    log_: Log,
    host: str,
    port: int,
    config: BrokerConfig,
    metrics_address: tuple[str, int] | None = None,
    companions: Sequence[Companion] = (),
    listeners: Sequence[Listener] = (),
    tls: ssl.SSLContext | None = None,
) -> None:
    """Run a broker on ``log_`` until SIGTERM/SIGINT: the `kafkaesque serve` command.

    ``companions`` run beside it (the archiver): each gets an event set at shutdown and is
    awaited after the last request was answered."""
    await log_.stores.ping()
    raise_open_files_limit()
    keep_freed_memory()
    metrics = Metrics()
    broker = Broker(log_, config)
    server = Server(broker, host, port, metrics, listeners=listeners, tls=tls)
    lag: asyncio.Task[None] | None = None
    if metrics_address is not None:
        lags = Lag(broker)  # needs Redis: computed every few seconds while served
        metrics.registry.register(lags)
        metrics.serve(*metrics_address)
        lag = asyncio.create_task(lags.run(), name="consumer lag")
    stopping = asyncio.Event()
    tasks = [asyncio.create_task(companion(stopping)) for companion in companions]
    try:
        await server.serve()
    finally:
        if lag is not None:
            await cancel_and_wait(lag)
        stopping.set()
        for task in tasks:
            try:
                await asyncio.wait_for(task, SHUTDOWN_GRACE)
            except Exception:
                log.exception("a background task failed while stopping")
