"""The asyncio server: connections, framing, in-order responses, dispatch by api key."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence

from kafkaesque.log import Log
from kafkaesque.outage import REDIS, REDIS_CONNECTION_ERRORS
from wire.broker import Broker, BrokerConfig
from wire.handlers import HANDLERS, supported
from wire.metrics import Metrics, api_name
from wire.protocol import (
    MAX_REQUEST_SIZE,
    ConnectionState,
    DropConnection,
    MalformedRequest,
    UnsupportedVersion,
    api_versions_fallback,
    encode_response,
    parse_request,
)

log = logging.getLogger(__name__)

SHUTDOWN_GRACE = 10.0  # seconds in-flight requests get to finish on SIGTERM
API_VERSIONS = 18
REPEAT_LOG_INTERVAL = 60.0  # seconds between lines counting a repeated warning or error


class LogThrottle:
    """Logs the first occurrence of a kind of event in full, then one line per interval
    counting its repeats: a failure on every request must not write a traceback each."""

    def __init__(self, logger: logging.Logger, interval: float = REPEAT_LOG_INTERVAL) -> None:
        self.logger = logger
        self.interval = interval
        self._repeats: dict[Hashable, int] = {}  # key -> repeats in the current interval

    def log(
        self,
        key: Hashable,
        level: int,
        summary: str,
        msg: str,
        *args: object,
        exc_info: BaseException | None = None,
    ) -> None:
        """Log ``msg`` unless ``key`` was logged within the interval; repeats are reported
        as "``summary``: N more in the last S s" at the interval's end."""
        if key in self._repeats:
            self._repeats[key] += 1
            return
        self._repeats[key] = 0
        self.logger.log(level, msg, *args, exc_info=exc_info)
        self._schedule(key, level, summary)

    def _schedule(self, key: Hashable, level: int, summary: str) -> None:
        asyncio.get_running_loop().call_later(self.interval, self._report, key, level, summary)

    def _report(self, key: Hashable, level: int, summary: str) -> None:
        count = self._repeats.pop(key)
        if count:  # still happening: count on; else the next one is logged in full
            self.logger.log(level, "%s: %d more in the last %g s", summary, count, self.interval)
            self._repeats[key] = 0
            self._schedule(key, level, summary)


class Server:
    def __init__(self, broker: Broker, host: str, port: int, metrics: Metrics | None = None):
        self.broker = broker
        self.host = host
        self.port = port
        self.metrics = metrics or Metrics()
        self.throttle = LogThrottle(log)
        self._server: asyncio.Server | None = None
        self._idle: dict[asyncio.StreamWriter, bool] = {}  # connection -> waiting for a request
        self._stopping = False

    async def start(self) -> None:
        await self.broker.start()
        try:
            self._server = await asyncio.start_server(self._connection, self.host, self.port)
        except OSError as exc:  # the address is taken or not ours: stop what started
            await self.broker.stop()
            reason = exc.strerror or str(exc)
            raise OSError(
                exc.errno, f"cannot listen on {self.host}:{self.port}: {reason}"
            ) from None
        except BaseException:
            await self.broker.stop()
            raise
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]

    async def serve(self) -> None:
        """Serve until SIGTERM or SIGINT, then shut down gracefully."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):  # before listening: no window where
            loop.add_signal_handler(sig, stop.set)  # a signal kills a listening broker
        await self.start()
        log.info("kafkaesque broker listening on %s:%d", self.host, self.port)
        await stop.wait()
        await self.shutdown()

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish, close connections."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        self.broker.closing()  # long-polling fetches and group joins answer now
        for writer, idle in list(self._idle.items()):
            if idle:
                writer.close()
        deadline = time.monotonic() + SHUTDOWN_GRACE
        while self._idle and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for writer in list(self._idle):
            writer.close()
        await self.broker.stop()
        log.info("stopped")

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client_host = f"/{peer[0]}" if isinstance(peer, tuple) else ""
        connection = ConnectionState()
        self._idle[writer] = True
        self.metrics.connections.inc()
        self.metrics.connections_total.inc()
        supported_apis = supported()
        max_idle = self.broker.config.connections_max_idle_ms / 1000
        try:
            while not self._stopping:
                self._idle[writer] = True
                try:
                    async with asyncio.timeout(max_idle):
                        size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
                        self._idle[writer] = False
                        if not 0 < size <= MAX_REQUEST_SIZE:
                            raise MalformedRequest(f"request size {size} out of range")
                        frame = await reader.readexactly(size)
                except TimeoutError:
                    log.info("closing connection from %s: idle for %.0f s", peer, max_idle)
                    break
                started = time.perf_counter()
                self.metrics.bytes_in.inc(size + 4)
                try:
                    request = parse_request(frame, supported_apis, client_host, connection)
                except UnsupportedVersion as exc:
                    if exc.api_key != API_VERSIONS:
                        raise
                    response_bytes = api_versions_fallback(exc.correlation_id, supported_apis)
                else:
                    response = await HANDLERS[request.api_key].handler(self.broker, request)
                    name = api_name(request.api_key)
                    self.metrics.requests.labels(name).inc()
                    self.metrics.latency.labels(name).observe(time.perf_counter() - started)
                    if response is None:  # acks=0 produce: no response at all
                        continue
                    response_bytes = encode_response(request.correlation_id, response)
                writer.write(response_bytes)
                self.metrics.bytes_out.inc(len(response_bytes))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed the connection
        except (MalformedRequest, UnsupportedVersion, DropConnection) as exc:
            log.warning("closing connection from %s: %s", peer, exc)
            self.metrics.errors.labels(type(exc).__name__).inc()
        except REDIS_CONNECTION_ERRORS as exc:  # the client reconnects and retries
            REDIS.failed(exc)  # logged once per outage
            self.metrics.errors.labels("redis").inc()
        except Exception as exc:
            self._internal_error(exc, peer)
            self.metrics.errors.labels("internal").inc()
        finally:
            self._idle.pop(writer, None)
            self.metrics.connections.dec()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

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
) -> None:
    """Run a broker on ``log_`` until SIGTERM/SIGINT: the `kafkaesque serve` command.

    ``companions`` run beside it (the archiver): each gets an event set at shutdown and is
    awaited after the last request was answered."""
    await log_.redis.ping()
    metrics = Metrics()
    if metrics_address is not None:
        metrics.serve(*metrics_address)
    server = Server(Broker(log_, config), host, port, metrics)
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
