"""Micro-benchmark of kafkaesque.records (build and batch): build_batch, decode_values.

Usage: python scripts/bench/records.py [--lines N] [--batch N] [--compression none]

Uses the first N lines of /usr/share/dict/words (generated words if it is
missing) and compares with ``b"\\n".join`` / ``bytes.split`` in the same
process, which is roughly the cost floor of the CLI's line handling.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from kafkaesque.records.batch import decode_batch, decode_values
from kafkaesque.records.build import build_batch
from kafkaesque.records.compression import Compression

WORDS = "/usr/share/dict/words"


def load_lines(count: int) -> list[bytes]:
    if os.path.exists(WORDS):
        with open(WORDS, "rb") as f:
            lines = f.read().split(b"\n")[:count]
        if len(lines) >= count // 2:
            return lines
    rng = random.Random(42)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choices(letters, k=rng.randint(3, 14))).encode() for _ in range(count)]


def best_of(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def report(name: str, seconds: float, records: int, baseline: float | None = None) -> None:
    us = seconds / records * 1e6
    ratio = f"  {seconds / baseline:5.1f}x baseline" if baseline else ""
    print(f"{name:<28} {us:7.3f} us/record  {records / seconds / 1e6:6.2f} M records/s{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--compression", default="none")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    compression = Compression.parse(args.compression)
    lines = load_lines(args.lines)
    n = len(lines)
    chunks = [lines[i : i + args.batch] for i in range(0, n, args.batch)]
    batches = [build_batch(c, timestamp=0, compression=compression) for c in chunks]
    assert [v for b in batches for v in decode_values(b)] == lines
    avg = sum(map(len, lines)) / n
    print(f"{n} lines, avg {avg:.1f} bytes, {args.batch}-record batches, {compression.name}")

    joined = b"\n".join(lines)
    join_s = best_of(lambda: b"\n".join(lines), args.repeat)
    split_s = best_of(lambda: joined.split(b"\n"), args.repeat)
    build_s = best_of(
        lambda: [build_batch(c, timestamp=0, compression=compression) for c in chunks],
        args.repeat,
    )
    values_s = best_of(lambda: [decode_values(b) for b in batches], args.repeat)
    decode_s = best_of(lambda: [decode_batch(b) for b in batches], max(1, args.repeat // 2))

    report('baseline b"\\n".join', join_s, n)
    report("baseline bytes.split", split_s, n)
    report("build_batch", build_s, n, join_s)
    report("decode_values", values_s, n, split_s)
    report("decode_batch", decode_s, n, split_s)


if __name__ == "__main__":
    main()
