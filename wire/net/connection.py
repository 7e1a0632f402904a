"""One client connection: reading its requests, running them, answering in order."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import TYPE_CHECKING

from kafkaesque.errors import KafkaesqueError
from kafkaesque.hot.outage import REDIS, REDIS_CONNECTION_ERRORS
from kafkaesque.hot.pipelined import WRITTEN
from kafkaesque.log_throttle import clip
from wire.handlers import handle, supported
from wire.metrics import api_name
from wire.net.sasl import MAX_RECEIVE_SIZE
from wire.net.security import Listener
from wire.net.stream import (
    ClientStream,
    ConnectionIdle,
    ReadDeadline,
    RequestStalled,
    read_body,
)
from wire.protocol.codec import (
    PRODUCE,
    ConnectionState,
    DropConnection,
    MalformedRequest,
    UnsupportedVersion,
    api_versions_fallback,
    parse_request,
    response_pieces,
)

if TYPE_CHECKING:
    from wire.net.server import Server

log = logging.getLogger(__name__)

API_VERSIONS = 18
# Produce requests of one connection in flight at once (Connection._pipelined).
PIPELINE_DEPTH = 64


class Connection:
    """A client's requests, read one after another and answered in order. Produce requests
    are pipelined (the next is read once the previous one's appends are on their way to
    Redis); any other request waits for everything before it, as in Kafka."""

    def __init__(
        self,
        server: Server,
        listener: Listener,
        state: ConnectionState,
        stream: ClientStream,
    ) -> None:
        self.server = server
        self.broker = server.broker
        self.listener = listener
        self.state = state
        self.stream = stream
        self.peer = stream.get_extra_info("peername")
        ip = self.peer[0] if isinstance(self.peer, tuple) else ""
        self.client_host = f"/{ip}" if ip else ""
        self.supported_apis = supported()
        # Pipelined Produce requests: their tasks, the future set once the newest has
        # answered, and what failed in them (a failure closes the connection).
        self.tasks: set[asyncio.Task[None]] = set()
        self.tail: asyncio.Future[None] | None = None
        self.failures: list[BaseException] = []
        # The pipelined requests started, and the number of the first that failed: the
        # ones before it still answer, those after it not.
        self.started = 0
        self.failed_from = math.inf
        self.waiting = False  # for the next request's first byte
        config = server.broker.config
        self.max_idle = config.connections_max_idle_ms / 1000
        # A request sent in part must go on within the request timeout (and the idle one).
        self.stall = min(config.request_timeout_ms, config.connections_max_idle_ms) / 1000
        # The whole of a request's body must come within the request timeout (a client's
        # request.timeout.ms would have given up on it by then anyway).
        self.request_timeout = config.request_timeout_ms / 1000

    async def run(self) -> None:
        """Serve requests until the client leaves, a request is refused with the
        connection, or the server stops; then let pipelined requests finish."""
        deadline = ReadDeadline(self.stream)
        try:
            while not self.server.stopping:
                if not await self._next(deadline):
                    break
        except ConnectionIdle:
            self.server.throttle.client(
                "idle",
                logging.INFO,
                "idle connections closed",
                "closing connection from %s: idle for %.0f s",
                self.peer,
                self.max_idle,
                logger=log,
            )
        except Exception as exc:
            if not self.failures:  # else a pipelined request's failure closed it, reported
                self._report(exc)
        finally:
            deadline.close()
            if self.tasks:  # their appends complete; their answers have nowhere to go
                await asyncio.gather(*self.tasks, return_exceptions=True)
            if self.state.read_cache is not None:
                self.state.read_cache.close()

    async def _next(self, deadline: ReadDeadline) -> bool:
        """Read, run and answer one request (or start it, pipelined); False to close."""
        server, stream, config = self.server, self.stream, self.broker.config
        idle = server.idle
        budget = server.budget
        # A request already received whole (pipelined produce requests, mostly) is taken
        # as it is: no wait, so no deadline and no idle mark.
        prefix = stream.take_now(4)
        if prefix is None:
            idle[stream] = not self.tasks
            self.waiting = True
            deadline.start(self.max_idle, ConnectionIdle)
            first = await stream.readexactly(1)
            self.waiting = False
            idle[stream] = False
            deadline.start(self.stall, self._prefix_stalled)
            prefix = bytes(first) + bytes(await stream.readexactly(3))
            deadline.stop()
        else:
            idle[stream] = False
        size = int.from_bytes(prefix, "big", signed=True)
        if prefix[:2] == b"\x16\x03" and not self.listener.tls:  # a TLS ClientHello
            raise MalformedRequest(f"TLS handshake on the {self.listener.name} listener")
        if not 0 < size <= config.socket_request_max_bytes:
            raise MalformedRequest(
                f"request size {size} out of range (--socket-request-max-bytes "
                f"{config.socket_request_max_bytes})"
            )
        sasl = self.state.sasl
        if sasl is not None and not sasl.authenticated and size > MAX_RECEIVE_SIZE:
            raise MalformedRequest(
                f"SASL frame of {size} bytes before authentication (at most {MAX_RECEIVE_SIZE})"
            )
        # Back-pressure: the body is read only once its bytes fit in the budget; meanwhile
        # the socket is read no further than the stream's buffer (128 KiB), and the
        # client's sends block. No deadline while waiting for the budget: the client is
        # not late. Once reading, the whole body must come within the request timeout.
        frame: bytes | memoryview | None = None
        if size <= budget.large_above and stream.buffered >= size and budget.try_reserve(size):
            frame = stream.take_now(size)
            if frame is None:  # the stream failed meanwhile
                budget.release(size)
        if frame is None:
            if size > budget.large_above:
                frame = await self._read_large(size, deadline)
            else:
                await budget.reserve(size)
                try:
                    frame = await read_body(
                        stream, size, deadline, self.stall, self.request_timeout
                    )
                except BaseException:
                    budget.release(size)
                    raise
            deadline.stop()
        reserved = size
        try:
            server.metrics.bytes_in.inc(size + 4)
            if self.failures:  # a pipelined request failed (and said so)
                return False
            if self._may_pipeline(frame) and len(self.tasks) < PIPELINE_DEPTH:
                reserved = 0  # the task releases it
                await self._start_pipelined(frame, size)
                return True
            if self.tail is not None:  # the produce requests in flight answer first
                await self.tail
                self.tail = None
            if self.failures:
                return False
            response_bytes: list[bytes] | None
            if sasl is not None and sasl.raw_tokens:  # after a v0 SaslHandshake
                response_bytes, mute_ms = [await self._raw_token(frame)], 0
            else:
                response_bytes, mute_ms = await self.handle(frame)
            del frame  # not kept while the next request is awaited
        finally:
            if reserved:
                server.budget.release(reserved)
        if response_bytes is not None:  # None: acks=0 produce, no response at all
            await self._respond(response_bytes)
        if sasl is not None and sasl.failed:  # logged by the SASL state
            server.metrics.errors.labels("sasl").inc()
            return False
        if mute_ms:
            # Over its quota, or Redis short of memory: the next request is not read until
            # the throttle time has passed (KIP-219's muted channel). Nothing is in flight
            # meanwhile.
            idle[stream] = True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(mute_ms / 1000):
                    await server.stopped.wait()
        return True

    async def _read_large(self, size: int, deadline: ReadDeadline) -> bytes | memoryview:
        """The body of a large request, received beside the budget (one at a time, its
        buffer growing as bytes come), then reserved in it (RequestBudget.settle): a client
        that announces a large request and stalls holds no budget but its bytes."""
        budget = self.server.budget
        await budget.admit_large()
        try:
            frame = await read_body(
                self.stream, size, deadline, self.stall, self.request_timeout, budget.received
            )
        except BaseException:
            budget.abandon_large()
            raise
        deadline.stop()  # waiting for the budget is not the client's delay
        await budget.settle(size)
        return frame

    def _prefix_stalled(self) -> RequestStalled:
        return RequestStalled(f"request stalled: a partial size, then nothing for {self.stall:g} s")

    def _may_pipeline(self, frame: bytes | memoryview) -> bool:
        """Whether this request may start before the ones in flight have answered: a
        Produce (api key 0) of an authenticated client while no quota is set and Redis
        is not so full that producers are held back (the hold-back must keep the next
        request from being read, as it did). Its appends are written to Redis on the
        shared connection behind theirs, so they run in order (kafkaesque.hot.pipelined);
        other requests wait for everything before them, as in Kafka, where a
        connection's requests run one at a time."""
        sasl = self.state.sasl
        return (
            frame[:2] == b"\0\0"  # a frame may be shorter than a header (refused later)
            and not self.server.quotas.active
            and (sasl is None or (sasl.authenticated and not sasl.raw_tokens))
            and not self.broker.memory.throttle_ms()
        )

    async def _start_pipelined(self, frame: bytes | memoryview, size: int) -> None:
        """Start a Produce request and return once its appends are written to Redis."""
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        written = loop.create_future()
        number, self.started = self.started, self.started + 1
        task = asyncio.create_task(self._pipelined(frame, size, number, self.tail, ready, written))
        del frame
        self.tasks.add(task)
        task.add_done_callback(self._finished)
        self.tail = written
        await ready

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not self.tasks and self.waiting and self.stream in self.server.idle:
            self.server.idle[self.stream] = True  # nothing in flight: shutdown may close it

    async def _pipelined(
        self,
        frame: bytes | memoryview,
        size: int,
        number: int,
        previous: asyncio.Future[None] | None,
        ready: asyncio.Future[None],
        written: asyncio.Future[None],
    ) -> None:
        """One Produce request handled while the connection reads the next. ``previous``
        is set once the request before answered (None: none in flight), ``ready`` once
        this one's appends are written to Redis (or it finished without any), ``written``
        once it answered. A failure is reported and closes the connection once the
        requests before it have answered."""

        def appends_written() -> None:
            if not ready.done():
                ready.set_result(None)

        WRITTEN.set(appends_written)  # this task's context only
        try:
            try:
                response_bytes, _ = await self.handle(frame)
            finally:
                del frame
                self.server.budget.release(size)
                appends_written()
            if previous is not None:
                await previous
            if (
                response_bytes is not None
                and number < self.failed_from
                and not self.stream.is_closing()
            ):
                await self._respond(response_bytes)
        except Exception as exc:
            if not self.failures:
                self._report(exc)
            self.failures.append(exc)
            self.failed_from = min(self.failed_from, number)
            if previous is not None:  # the requests read before this one answer first
                await previous
            self.stream.abort()
        finally:
            written.set_result(None)

    async def _respond(self, response_bytes: list[bytes]) -> None:
        """Write one response (pieces in order) and wait while the client is behind on
        reading. Small responses go out together with the others of the same loop turn
        (one send for a batch of pipelined answers); a fetch's large pieces go out as the
        bytes Redis returned, uncopied."""
        stream = self.stream
        sent = 0
        for piece in response_bytes:
            stream.write(piece)
            sent += len(piece)
        self.server.metrics.bytes_out.inc(sent)
        await stream.drain()

    async def handle(self, frame: bytes | memoryview) -> tuple[list[bytes] | None, int]:
        """The response frame to one request frame, in pieces to write in order (None for
        none: acks=0), and the ms to mute the connection after it for being over a quota."""
        started = time.perf_counter()
        server, state = self.server, self.state
        try:
            request = parse_request(frame, self.supported_apis, self.client_host, state)
        except UnsupportedVersion as exc:
            if exc.api_key != API_VERSIONS:
                raise
            return [api_versions_fallback(exc.correlation_id, self.supported_apis)], 0
        if state.sasl is not None:  # before authentication only SASL and ApiVersions
            state.sasl.check_request(request.api_key)
        request = server.throttling.before(request)
        response = await handle(self.broker, request)
        counted = server.api_metrics.get(request.api_key)
        if counted is None:  # labels() per request costs more than the rest of a produce's
            name = api_name(request.api_key)
            counted = server.metrics.requests.labels(name), server.metrics.latency.labels(name)
            server.api_metrics[request.api_key] = counted
        counted[0].inc()
        counted[1].observe(time.perf_counter() - started)
        if response is None:
            encoded = None
        else:
            encoded = response_pieces(request.correlation_id, response)
        size = 0 if encoded is None else sum(map(len, encoded))
        throttled, mute_ms = server.throttling.after(request, response, size)
        if request.api_key == PRODUCE:
            # Redis short of memory: the answer (its throttle_time says it) goes at once,
            # the next request waits (wire/handlers/produce.py says why).
            mute_ms = max(mute_ms, self.broker.memory.throttle_ms())
        if throttled is not response:  # a throttle time or an emptied fetch to tell
            encoded = response_pieces(request.correlation_id, throttled)
        return encoded, mute_ms

    async def _raw_token(self, frame: bytes | memoryview) -> bytes:
        """A bare SASL token after a v0 SaslHandshake, answered with a bare token (Kafka's
        original framing); a refusal closes the connection (``failed``) with no answer."""
        sasl = self.state.sasl
        try:
            answer, _ = await sasl.authenticate(bytes(frame))
        except KafkaesqueError:
            return b""
        if sasl.authenticated:
            self.state.principal = f"User:{sasl.user}"
        return len(answer).to_bytes(4, "big") + answer

    def _report(self, exc: BaseException) -> None:
        """Log why a connection closes, once, as its kind of failure deserves."""
        metrics = self.server.metrics
        if isinstance(exc, asyncio.IncompleteReadError | ConnectionError):
            return  # the client closed the connection
        if isinstance(exc, MalformedRequest | UnsupportedVersion | DropConnection | RequestStalled):
            # The client's doing, as often as it likes: one line per kind, then a count.
            kind = type(exc).__name__
            self.server.throttle.client(
                kind,
                logging.WARNING,
                f"connections closed ({kind})",
                "closing connection from %s: %s",
                self.peer,
                clip(exc, 200),
                logger=log,
            )
            metrics.errors.labels(type(exc).__name__).inc()
        elif isinstance(exc, REDIS_CONNECTION_ERRORS):  # the client reconnects and retries
            REDIS.failed(exc)  # logged once per outage
            metrics.errors.labels("redis").inc()
        elif isinstance(exc, Exception):
            self._internal_error(exc)
            metrics.errors.labels("internal").inc()

    def _internal_error(self, exc: Exception) -> None:
        """Log a failure in full the first time, then count its repeats: the same bug hit by
        every request must not write a traceback per request."""
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb else "?"
        self.server.throttle.log(
            (type(exc), where),
            logging.ERROR,
            f"connections closed after the internal error {type(exc).__name__} at {where}",
            "closing connection from %s after an internal error",
            self.peer,
            exc_info=exc,
        )
