"""A minimal Kafka protocol client for tests: kio entities over a real socket."""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

import wire.handlers  # noqa: F401  (registers the handlers)
from kafkaesque.log import Log
from wire.broker import Broker, BrokerConfig
from wire.protocol import build, schema_class
from wire.server import Server


def request(api_key: int, version: int, **fields: Any) -> Any:
    return build(load_request_schema(api_key, version), **fields)


def part(api_key: int, version: int, entity: str, **fields: Any) -> Any:
    """A nested request entity, e.g. part(0, 7, "TopicProduceData", name=...)."""
    return build(schema_class(load_request_schema(api_key, version), entity), **fields)


class WireClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation_id = 0

    @classmethod
    async def connect(cls, port: int) -> WireClient:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def encode(self, body: Any) -> bytes:
        self.correlation_id += 1
        header_class = type(body).__header_schema__
        buf = io.BytesIO()
        entity_writer(header_class)(
            buf,
            header_class(
                request_api_key=body.__api_key__,
                request_api_version=body.__version__,
                correlation_id=self.correlation_id,
                client_id="tests",
            ),
        )
        entity_writer(type(body))(buf, body)
        return buf.getvalue()

    async def send_frame(self, frame: bytes) -> None:
        self.writer.write(struct.pack(">i", len(frame)) + frame)
        await self.writer.drain()

    async def read_frame(self, timeout: float = 10) -> bytes:
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), timeout))[0]
        return await asyncio.wait_for(self.reader.readexactly(size), timeout)

    async def call(self, body: Any) -> Any:
        await self.send_frame(self.encode(body))
        frame = await self.read_frame()
        schema = load_response_schema(body.__api_key__, body.__version__)
        header, used = entity_reader(schema.__header_schema__)(frame, 0)
        assert header.correlation_id == self.correlation_id
        response, size = entity_reader(schema)(frame, used)
        assert used + size == len(frame)
        return response

    async def close(self) -> None:
        self.writer.close()


async def run_with_broker(
    redis_url: str,
    scenario: Callable[[Server], Awaitable[None]],
    **config: Any,
) -> None:
    """Start an in-process broker on a free port, run the scenario, shut down."""
    client = redis.asyncio.Redis.from_url(redis_url)
    server = Server(Broker(Log(client), BrokerConfig(**config)), "127.0.0.1", 0)
    await server.start()
    server.broker.config.port = server.port
    try:
        await scenario(server)
    finally:
        await server.shutdown()
        await client.aclose()
