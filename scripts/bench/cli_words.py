"""Produce and consume the word list through the CLI's code path, against raw redis-py.

Runs a private redis-server (the embedded default: unix socket, AOF on) in a temp dir and
prints records/s for kafkaesque's produce and consume next to a baseline in the same run:
RPUSH of the same lines 1024 per call, LRANGE 512 per call. Interpreter start-up is excluded.

    python scripts/bench/cli_words.py [FILE] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import tempfile
import time
from pathlib import Path

import redis
import redis.asyncio

from kafkaesque.cli.line_consumer import Consumer
from kafkaesque.cli.line_producer import LineProducer
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.embedded import EmbeddedRedis
from kafkaesque.hot.log import Log


class Sink(io.RawIOBase):
    """Counts bytes written, like stdout redirected to /dev/null but checkable."""

    def __init__(self) -> None:
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.count += len(data)
        return len(data)


async def kafkaesque_round(url: str, path: Path, n: int, topic: str) -> tuple[float, float]:
    log = Log(redis.asyncio.Redis.from_url(url))
    config = await log.create_topic(TopicConfig(topic, 1, page_size=4096))
    producer = LineProducer(log, config, batch_size=1024)
    with path.open("rb") as fh:
        t0 = time.perf_counter()
        summary = await producer.produce(fh)
        produce_s = time.perf_counter() - t0
    assert summary.records == n
    sink = Sink()
    t0 = time.perf_counter()
    written = await Consumer(log, topic, {0: 0}, fetch_size=512).run(sink)
    consume_s = time.perf_counter() - t0
    assert written == n and sink.count == path.stat().st_size, (written, sink.count)
    await log.delete_topic(topic)
    await log.redis.aclose()
    return produce_s, consume_s


def baseline_round(url: str, path: Path, n: int, key: str) -> tuple[float, float]:
    r = redis.Redis.from_url(url)
    t0 = time.perf_counter()
    with path.open("rb") as fh:
        lines = fh.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for i in range(0, len(lines), 1024):
        r.rpush(key, *lines[i : i + 1024])
    produce_s = time.perf_counter() - t0
    sink = Sink()
    t0 = time.perf_counter()
    for i in range(0, n, 512):
        chunk = r.lrange(key, i, i + 511)
        sink.write(b"\n".join(chunk) + b"\n")
    consume_s = time.perf_counter() - t0
    r.delete(key)
    return produce_s, consume_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", default="/usr/share/dict/words", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n = args.file.read_bytes().count(b"\n")
    with tempfile.TemporaryDirectory(prefix="ks-bench-") as home:
        server = EmbeddedRedis(Path(home))
        url = server.ensure_started()
        try:
            ks = [
                asyncio.run(kafkaesque_round(url, args.file, n, f"b{i}"))
                for i in range(args.rounds)
            ]
            raw = [baseline_round(url, args.file, n, f"raw{i}") for i in range(args.rounds)]
        finally:
            server.stop()
    print(
        f"{n} records from {args.file}, best of {args.rounds} rounds, redis-server on a unix socket"
    )
    for name, i in (("produce", 0), ("consume", 1)):
        ours = n / min(r[i] for r in ks)
        base = n / min(r[i] for r in raw)
        print(
            f"{name}: kafkaesque {ours:>12,.0f} records/s   raw redis-py {base:>12,.0f} records/s"
            f"   ratio {ours / base:.2f}"
        )


if __name__ == "__main__":
    main()
