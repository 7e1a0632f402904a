"""Where the broker's CPU goes: py-spy samples a `kafkaesque serve` subprocess under load.

Starts a private redis-server and a broker (scripts/bench/broker_process.py), then per
phase attaches `py-spy record` to the broker, runs the load with confluent-kafka and
detaches:

- produce: N records of 100 bytes round-robin over --partitions (default 1; acks=1,
  linger 5 ms, big batches);
- consume: the same N records read back from offset 0 (fetch.queue.backoff.ms=50);
- requests: N / 20 records with linger.ms=0, so nearly one produce request per record
  (the broker's cost per request, what latency at a steady rate is made of).

Prints, per phase, the functions with the most samples on top of the stack (self) and
on the stack at all (total), as shares of the broker's busy samples (idle waits in the
event loop's selector are not sampled). The raw stacks stay in --out DIR for flame graphs.

    python scripts/bench/profile_wire.py [--records N] [--top K] [--out DIR] [--native]
                                         [--partitions P] [--phases produce,consume,requests]

Needs py-spy (the test extra) and permission to ptrace the broker (same user).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from broker_process import FAST_CONSUMER, broker_on_embedded_redis, consume, produce
from confluent_kafka.admin import AdminClient, NewTopic


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("py-spy not found: pip install py-spy")
    return found


def broker_pid(port: int) -> int:
    """The pid of the process listening on 127.0.0.1:``port`` (the broker subprocess)."""
    out = subprocess.run(
        ["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout
    return int(out.split("pid=")[1].split(",")[0])


def record(pid: int, path: Path, native: bool) -> subprocess.Popen:
    command = [py_spy(), "record", "--pid", str(pid), "--format", "raw", "-o", str(path)]
    command += ["--rate", "200", "--nonblocking"] + (["--native"] if native else [])
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the load starts
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
    proc.wait(30)


def frame_name(frame: str) -> str:
    """ "function (path/to/file.py:line)" -> "function (file.py)": lines folded together."""
    name, _, where = frame.partition(" (")
    file = where.rsplit(":", 1)[0].rstrip(")")
    parts = Path(file).parts
    short = "/".join(parts[-2:]) if len(parts) > 1 else file
    return f"{name} ({short})"


def summarize(path: Path, top: int) -> list[str]:
    """The top functions by self and by total samples, as lines of text."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = [frame_name(f) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith("process ")]  # py-spy's pid frame
        if not frames:
            continue
        samples += n
        own[frames[-1]] += n
        for f in set(frames):
            total[f] += n
    lines = [f"{samples} busy samples"]
    lines.append(f"  {'self %':>7}  function")
    lines += [f"  {100 * n / samples:>6.1f}%  {f}" for f, n in own.most_common(top)]
    lines.append(f"  {'total %':>7}  function")
    lines += [f"  {100 * n / samples:>6.1f}%  {f}" for f, n in total.most_common(top)]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", type=Path, default=None, help="keep the raw stacks here")
    parser.add_argument("--native", action="store_true", help="sample C frames too")
    parser.add_argument("--partitions", type=int, default=1, help="of the produce phase's topic")
    parser.add_argument(
        "--phases", default="produce,consume,requests", help="comma-separated, in this order"
    )
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="ks-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    n = args.records
    with broker_on_embedded_redis() as (bootstrap, _):
        pid = broker_pid(int(bootstrap.rsplit(":", 1)[1]))
        if args.partitions > 1:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("bench", args.partitions)])["bench"].result(30)
        produce(bootstrap, "warm", 10_000)  # imports, caches and the topic before sampling
        consume(bootstrap, "warm", 10_000, FAST_CONSUMER)
        results = {}
        for phase in args.phases.split(","):
            spy = record(pid, out / f"{phase}.txt", args.native)
            if phase == "produce":
                seconds = produce(bootstrap, "bench", n, args.partitions)
            elif phase == "consume":
                seconds = consume(bootstrap, "bench", n, FAST_CONSUMER)
            else:
                seconds = produce(bootstrap, "small", n // 20, config={"linger.ms": 0})
            stop(spy)
            results[phase] = seconds
    for phase, seconds in results.items():
        count = n // 20 if phase == "requests" else n
        print(
            f"== {phase}: {count:,} records in {seconds:.2f} s ({count / seconds:,.0f} records/s)"
        )
        print("\n".join(summarize(out / f"{phase}.txt", args.top)))
        print()
    print(f"raw stacks: {out}")


if __name__ == "__main__":
    main()
