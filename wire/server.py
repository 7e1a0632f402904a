"""The asyncio server: connections, framing, in-order responses, dispatch by api key."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import ssl
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kafkaesque.errors import KafkaesqueError
from kafkaesque.log import Log
from kafkaesque.outage import REDIS, REDIS_CONNECTION_ERRORS
from kafkaesque.pipelined import WRITTEN
from kafkaesque.quota_rates import REFRESH_SECONDS, QuotaManager
from kafkaesque.quotas import QuotaStore
from kafkaesque.tasks import cancel_and_wait
from wire.broker import Broker, BrokerConfig
from wire.budget import RequestBudget
from wire.connection_io import LogThrottle, RequestStalled, raise_open_files_limit, read_body
from wire.handlers import handle, supported
from wire.handlers.quotas import Throttling
from wire.metrics import Metrics, api_name
from wire.protocol import (
    ConnectionState,
    DropConnection,
    MalformedRequest,
    UnsupportedVersion,
    api_versions_fallback,
    parse_request,
    response_pieces,
)
from wire.sasl import MAX_RECEIVE_SIZE, SaslSettings, SaslState
from wire.security import TLS_HANDSHAKE_TIMEOUT, Listener, distinguished_name

log = logging.getLogger(__name__)

SHUTDOWN_GRACE = 10.0  # seconds in-flight requests get to finish on SIGTERM
API_VERSIONS = 18
# Connections the kernel queues before they are accepted: a burst of clients connecting at
# once is accepted, not left to retry their handshake a second later (asyncio's 100).
LISTEN_BACKLOG = 1024
# Responses up to this size are joined and written at once: a write per piece is a send()
# per piece while the socket keeps up. Larger ones (fetched records) are not copied.
JOIN_BELOW = 64 << 10
# Produce requests of one connection in flight at once (wire.server.Server._pipelined).
PIPELINE_DEPTH = 64


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
        self.budget = RequestBudget(broker.config.queued_max_request_bytes)
        self.throttle = LogThrottle(log)
        self._api_metrics: dict[int, tuple[Any, Any]] = {}  # api key -> its labelled metrics
        # Client quotas (Kafka's KIP-13/KIP-219), re-read from Redis every quota_refresh s.
        self.quotas = QuotaManager(QuotaStore(broker.log.redis, broker.log.ns), quota_refresh)
        self.throttling = Throttling(self.quotas)
        self._quota_refresh: asyncio.Task[None] | None = None
        self._servers: list[asyncio.Server] = []
        self._idle: dict[asyncio.StreamWriter, bool] = {}  # connection -> waiting for a request
        self._per_ip: Counter[str] = Counter()
        self._stopping = False
        self._stopped = asyncio.Event()  # set at shutdown: ends the mutes of throttled clients
        self.metrics.queued_request_bytes.set_function(
            lambda: self.budget.reserved + self.budget.beside
        )
        self.metrics.waiting_for_memory.set_function(lambda: self.budget.waiting)

    async def start(self) -> None:
        await self.broker.start()
        listener = self.listeners[0]
        try:
            for listener in self.listeners:
                server = await asyncio.start_server(
                    functools.partial(self._connection, listener),
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
        self._stopping = True
        self._stopped.set()
        for server in self._servers:
            server.close()
        await self.broker.leave()  # the other brokers take this one's partitions now
        self.broker.closing()  # long-polling fetches and group joins answer now
        for writer, idle in list(self._idle.items()):
            if idle:
                writer.close()
        deadline = time.monotonic() + SHUTDOWN_GRACE
        while self._idle and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for writer in list(self._idle):
            writer.close()
        if self._quota_refresh is not None:
            await cancel_and_wait(self._quota_refresh)
        await self.broker.stop()
        log.info("stopped")

    async def _close_listeners(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()

    async def _start_tls(self, writer: asyncio.StreamWriter, peer: object) -> bool:
        """The TLS handshake of a new connection on an SSL or SASL_SSL listener; a failed
        one (a plaintext client, a bad or missing client certificate) is one log line."""
        try:
            await writer.start_tls(self.tls, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT)
        except (OSError, TimeoutError, ssl.SSLError, EOFError) as exc:
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            log.warning("closing connection from %s: TLS handshake failed: %s", peer, reason)
            self.metrics.errors.labels("tls").inc()
            writer.transport.abort()
            return False
        return True

    def _refusal(self, ip: str) -> tuple[str, int] | None:
        """The limit (option name, value) that refuses a new connection from ``ip``: Kafka's
        max.connections and max.connections.per.ip; None if it is accepted."""
        config = self.broker.config
        limit = config.max_connections
        if limit is not None and len(self._idle) >= limit:
            return "max-connections", limit
        limit = config.max_connections_per_ip
        if limit is not None and self._per_ip[ip] >= limit:
            return "max-connections-per-ip", limit
        return None

    async def _connection(
        self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
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
        client_host = f"/{ip}" if ip else ""
        connection = ConnectionState(listener=listener.name)
        if listener.sasl:
            connection.sasl = SaslState(self.sasl, self.broker.credentials, str(peer))
        elif listener.tls:
            certificate = writer.get_extra_info("peercert")
            if certificate:  # mutual TLS: the principal is the certificate's subject
                connection.principal = f"User:{distinguished_name(certificate)}"
        self._idle[writer] = True
        self._per_ip[ip] += 1
        self.metrics.connections.inc()
        self.metrics.connections_total.inc()
        supported_apis = supported()
        config = self.broker.config
        max_idle = config.connections_max_idle_ms / 1000
        # A request sent in part must go on within the request timeout (and the idle one).
        stall = min(config.request_timeout_ms, config.connections_max_idle_ms) / 1000
        # Produce requests read while earlier ones are in flight (see _pipelined): their
        # tasks, the future set once the newest has answered, and what failed in them.
        tasks: set[asyncio.Task[None]] = set()
        tail: asyncio.Future[None] | None = None
        failures: list[BaseException] = []
        waiting = [False]  # for the next request's first byte

        def finished(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            if not tasks and waiting[0] and writer in self._idle:
                self._idle[writer] = True  # nothing in flight: shutdown may close it

        try:
            while not self._stopping:
                self._idle[writer] = not tasks
                waiting[0] = True
                try:
                    async with asyncio.timeout(max_idle):
                        first = await reader.readexactly(1)
                except TimeoutError:
                    log.info("closing connection from %s: idle for %.0f s", peer, max_idle)
                    break
                waiting[0] = False
                self._idle[writer] = False
                try:
                    async with asyncio.timeout(stall):
                        prefix = first + await reader.readexactly(3)
                except TimeoutError:
                    raise RequestStalled(
                        f"request stalled: a partial size, then nothing for {stall:g} s"
                    ) from None
                size = int.from_bytes(prefix, "big", signed=True)
                if prefix[:2] == b"\x16\x03" and not listener.tls:  # a TLS ClientHello
                    raise MalformedRequest(f"TLS handshake on the {listener.name} listener")
                if not 0 < size <= config.socket_request_max_bytes:
                    raise MalformedRequest(
                        f"request size {size} out of range (--socket-request-max-bytes "
                        f"{config.socket_request_max_bytes})"
                    )
                sasl = connection.sasl
                if sasl is not None and not sasl.authenticated and size > MAX_RECEIVE_SIZE:
                    raise MalformedRequest(
                        f"SASL frame of {size} bytes before authentication (at most "
                        f"{MAX_RECEIVE_SIZE})"
                    )
                # Back-pressure: the body is read only once its bytes fit in the budget;
                # meanwhile the socket is read no further than asyncio's buffer (128 KiB), and
                # the client's sends block.
                await self.budget.reserve(size)
                reserved = size
                try:
                    frame = await read_body(reader, size, stall)
                    self.metrics.bytes_in.inc(size + 4)
                    if failures:  # a pipelined request failed (and said so)
                        break
                    if self._may_pipeline(frame, connection) and len(tasks) < PIPELINE_DEPTH:
                        ready = asyncio.get_running_loop().create_future()
                        written = asyncio.get_running_loop().create_future()
                        task = asyncio.create_task(
                            self._pipelined(
                                frame,
                                size,
                                supported_apis,
                                client_host,
                                connection,
                                writer,
                                (tail, ready, written),
                                failures,
                                peer,
                            )
                        )
                        reserved = 0  # the task releases it
                        del frame
                        tasks.add(task)
                        task.add_done_callback(finished)
                        tail = written
                        await ready  # its appends are written to Redis: the next may follow
                        continue
                    if tail is not None:  # the produce requests in flight answer first
                        await tail
                        tail = None
                    if failures:  # a pipelined request failed (and said so)
                        break
                    if sasl is not None and sasl.raw_tokens:  # after a v0 SaslHandshake
                        token = await self._raw_token(frame, connection)
                        response_bytes, mute_ms = [token], 0
                    else:
                        response_bytes, mute_ms = await self._handle(
                            frame, supported_apis, client_host, connection
                        )
                    del frame  # not kept while the next request is awaited
                finally:
                    if reserved:
                        self.budget.release(reserved)
                if response_bytes is not None:  # None: acks=0 produce, no response at all
                    await self._respond(writer, response_bytes)
                if sasl is not None and sasl.failed:  # logged by the SASL state
                    self.metrics.errors.labels("sasl").inc()
                    break
                if mute_ms:
                    # Over its quota: the next request is not read until the throttle time
                    # has passed (KIP-219's muted channel). Nothing is in flight meanwhile.
                    self._idle[writer] = True
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(mute_ms / 1000):
                            await self._stopped.wait()
        except Exception as exc:
            if not failures:  # else a pipelined request's failure closed it, reported
                self._report(exc, peer)
        finally:
            if tasks:  # their appends complete; their answers have nowhere to go
                await asyncio.gather(*tasks, return_exceptions=True)
            if connection.read_cache is not None:
                connection.read_cache.close()
            self._idle.pop(writer, None)
            self._per_ip[ip] -= 1
            if not self._per_ip[ip]:
                del self._per_ip[ip]
            self.metrics.connections.dec()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _report(self, exc: BaseException, peer: object) -> None:
        """Log why a connection closes, once, as its kind of failure deserves."""
        if isinstance(exc, asyncio.IncompleteReadError | ConnectionError):
            return  # the client closed the connection
        if isinstance(exc, MalformedRequest | UnsupportedVersion | DropConnection | RequestStalled):
            log.warning("closing connection from %s: %s", peer, exc)
            self.metrics.errors.labels(type(exc).__name__).inc()
        elif isinstance(exc, REDIS_CONNECTION_ERRORS):  # the client reconnects and retries
            REDIS.failed(exc)  # logged once per outage
            self.metrics.errors.labels("redis").inc()
        elif isinstance(exc, Exception):
            self._internal_error(exc, peer)
            self.metrics.errors.labels("internal").inc()

    def _may_pipeline(self, frame: bytes | memoryview, connection: ConnectionState) -> bool:
        """Whether this request may start before the ones in flight have answered: a
        Produce (api key 0) of an authenticated client while no quota is set and Redis
        is not so full that producers are held back (the hold-back must keep the next
        request from being read, as it did). Its appends are written to Redis on the
        shared connection behind theirs, so they run in order (kafkaesque.pipelined);
        other requests wait for everything before them, as in Kafka, where a
        connection's requests run one at a time."""
        sasl = connection.sasl
        return (
            frame[:2] == b"\0\0"  # a frame may be shorter than a header (refused later)
            and not self.quotas.active
            and (sasl is None or (sasl.authenticated and not sasl.raw_tokens))
            and not self.broker.memory.throttle_ms()
        )

    async def _pipelined(
        self,
        frame: bytes | memoryview,
        size: int,
        supported_apis: dict[int, tuple[int, int]],
        client_host: str,
        connection: ConnectionState,
        writer: asyncio.StreamWriter,
        order: tuple[asyncio.Future[None] | None, asyncio.Future[None], asyncio.Future[None]],
        failures: list[BaseException],
        peer: object,
    ) -> None:
        """One Produce request handled while the connection reads the next. ``order``:
        the previous request's future set once it answered (None: none in flight), this
        one's set once its appends are written to Redis (or it finished without any), and
        this one's set once it answered. A failure is reported and closes the
        connection."""
        previous, ready, written = order

        def appends_written() -> None:
            if not ready.done():
                ready.set_result(None)

        WRITTEN.set(appends_written)  # this task's context only
        try:
            try:
                response_bytes, _ = await self._handle(
                    frame, supported_apis, client_host, connection
                )
            finally:
                del frame
                self.budget.release(size)
                appends_written()
            if previous is not None:
                await previous
            if response_bytes is not None and not failures and not writer.is_closing():
                await self._respond(writer, response_bytes)
        except Exception as exc:
            if not failures:
                self._report(exc, peer)
            failures.append(exc)
            writer.transport.abort()
        finally:
            written.set_result(None)

    async def _respond(self, writer: asyncio.StreamWriter, response_bytes: list[bytes]) -> None:
        """Write one response (pieces in order) and wait until the socket takes it."""
        sent = sum(map(len, response_bytes))
        if sent <= JOIN_BELOW:  # one send, not one per piece
            writer.write(b"".join(response_bytes))
        else:  # a fetch's records go out as the bytes Redis returned, uncopied
            for piece in response_bytes:
                writer.write(piece)
        self.metrics.bytes_out.inc(sent)
        await writer.drain()

    async def _handle(
        self,
        frame: bytes | memoryview,
        supported_apis: dict[int, tuple[int, int]],
        client_host: str,
        connection: ConnectionState,
    ) -> tuple[list[bytes] | None, int]:
        """The response frame to one request frame, in pieces to write in order (None for
        none: acks=0), and the ms to mute the connection after it for being over a quota."""
        started = time.perf_counter()
        try:
            request = parse_request(frame, supported_apis, client_host, connection)
        except UnsupportedVersion as exc:
            if exc.api_key != API_VERSIONS:
                raise
            return [api_versions_fallback(exc.correlation_id, supported_apis)], 0
        if connection.sasl is not None:  # before authentication only SASL and ApiVersions
            connection.sasl.check_request(request.api_key)
        request = self.throttling.before(request)
        response = await handle(self.broker, request)
        counted = self._api_metrics.get(request.api_key)
        if counted is None:  # labels() per request costs more than the rest of a produce's
            name = api_name(request.api_key)
            counted = self.metrics.requests.labels(name), self.metrics.latency.labels(name)
            self._api_metrics[request.api_key] = counted
        counted[0].inc()
        counted[1].observe(time.perf_counter() - started)
        if response is None:
            encoded = None
        else:
            encoded = response_pieces(request.correlation_id, response)
        size = 0 if encoded is None else sum(map(len, encoded))
        throttled, mute_ms = self.throttling.after(request, response, size)
        if throttled is not response:  # a throttle time or an emptied fetch to tell
            encoded = response_pieces(request.correlation_id, throttled)
        return encoded, mute_ms

    async def _raw_token(self, frame: bytes | memoryview, connection: ConnectionState) -> bytes:
        """A bare SASL token after a v0 SaslHandshake, answered with a bare token (Kafka's
        original framing); a refusal closes the connection (``failed``) with no answer."""
        sasl = connection.sasl
        try:
            answer, _ = await sasl.authenticate(bytes(frame))
        except KafkaesqueError:
            return b""
        if sasl.authenticated:
            connection.principal = f"User:{sasl.user}"
        return len(answer).to_bytes(4, "big") + answer

    async def _over_connection_rate(self, ip: str, writer: asyncio.StreamWriter) -> bool:
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

    def _internal_error(self, exc: Exception, peer: object) -> None:
        """Log a failure in full the first time, then count its repeats: the same bug hit by
        every request must not write a traceback per request."""
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb else "?"
        self.throttle.log(
            (type(exc), where),
            logging.ERROR,
            f"connections closed after the internal error {type(exc).__name__} at {where}",
            "closing connection from %s after an internal error",
            peer,
            exc_info=exc,
        )


Companion = Callable[[asyncio.Event], Awaitable[None]]


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
    await log_.redis.ping()
    raise_open_files_limit()
    metrics = Metrics()
    if metrics_address is not None:
        metrics.serve(*metrics_address)
    server = Server(Broker(log_, config), host, port, metrics, listeners=listeners, tls=tls)
    stopping = asyncio.Event()
    tasks = [asyncio.create_task(companion(stopping)) for companion in companions]
    try:
        await server.serve()
    finally:
        stopping.set()
        for task in tasks:
            try:
                await asyncio.wait_for(task, SHUTDOWN_GRACE)
            except Exception:
                log.exception("a background task failed while stopping")
