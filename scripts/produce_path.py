"""Which of the project's modules one Produce request runs through, from the socket to
append.lua and back: the list docs/architecture.md's "Produce path" names.

Starts a private redis-server and a broker in this process, sends one Produce (after a
first one that warms the caches), and records, with a profile hook on the event loop's
thread, every function of kafkaesque/, wire/ or storage_pg/ that runs on behalf of the
connection (a frame of wire/net/connection.py below it on the stack) or of the shared
Redis connection's replies (kafkaesque/hot/pipelined.py). Prints the modules in the
order they were first entered.

    .venv/bin/python scripts/produce_path.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kafkaesque.config.topic_config import TopicConfig  # noqa: E402
from kafkaesque.hot.connect import open_log  # noqa: E402
from kafkaesque.hot.embedded import EmbeddedRedis  # noqa: E402
from kafkaesque.records.build import build_batch  # noqa: E402
from tests.kafka_client import Connection  # noqa: E402
from wire.broker import Broker, BrokerConfig  # noqa: E402
from wire.net.server import Server  # noqa: E402

OURS = tuple(str(REPO / package) + "/" for package in ("kafkaesque", "wire", "storage_pg"))
ROOTS = ("wire/net/connection.py", "kafkaesque/hot/pipelined.py")


def _module(filename: str) -> str | None:
    if not filename.startswith(OURS):
        return None
    return str(Path(filename).relative_to(REPO))


def _for_the_request(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.endswith(ROOTS):
            return True
        frame = frame.f_back
    return False


async def trace_one_produce(url: str) -> list[str]:
    log = open_log(url)
    await log.create_topic(TopicConfig("path", 1))
    server = Server(Broker(log, BrokerConfig(port=0)), "127.0.0.1", 0)
    await server.start()
    seen: dict[str, None] = {}

    def hook(frame: FrameType, event: str, _: Any) -> None:
        if event != "call":
            return
        module = _module(frame.f_code.co_filename)
        if module is not None and module not in seen and _for_the_request(frame):
            seen[module] = None

    def produce(client: Connection) -> None:
        answer = client.produce("path", 0, build_batch([b"a record"]))
        assert answer.error_code == 0, answer

    try:
        with Connection(f"127.0.0.1:{server.port}") as client:
            await asyncio.to_thread(produce, client)  # warms caches, connections, scripts
            sys.setprofile(hook)
            try:
                await asyncio.to_thread(produce, client)
            finally:
                sys.setprofile(None)
    finally:
        await server.shutdown()
        await log.stores.close()
    return list(seen)


def main() -> None:
    with tempfile.TemporaryDirectory() as home:
        redis = EmbeddedRedis(Path(home))
        try:
            modules = asyncio.run(trace_one_produce(redis.ensure_started()))
        finally:
            redis.stop()
    for module in modules:
        print(module)
    print(f"{len(modules)} modules", file=sys.stderr)


if __name__ == "__main__":
    main()
