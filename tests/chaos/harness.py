"""Chaos harness: producers and a consumer group run against a real broker while its
processes are killed, restarted and paused at random; then the whole log is read back
from offset 0 and checked against what the producers were told was written.

The servers: a redis-server with its AOF on, a throwaway PostgreSQL, a broker that
archives into it (and serves archived offsets from it) and a second archiver process, as
cron would run one beside the broker. Topic pages are small and few are kept, so most of
the log is read back from the archive.

The faults, one at a time, in seeded random order: SIGKILL and restart of the broker, of
redis-server (restarted from its AOF, same port and directory), of the archiver and of
PostgreSQL (the postmaster and every backend); SIGSTOP of the broker or of redis-server for
longer than the clients' request timeout, then SIGCONT.

Used by tests/chaos/test_chaos.py (a short run) and scripts/chaos.py (a long one).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import redis
import redis.asyncio
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from kafkaesque.hot.log import Log
from tests.pg import PostgresServer
from tests.servers import RedisServer
from tests.wire.conftest import REPO, Broker

TOPIC = "chaos"
GROUP = "chaos"
KINDS = (
    "broker-kill",
    "redis-kill",
    "archiver-kill",
    "postgres-kill",
    "broker-pause",
    "redis-pause",
)
# The clients' request and socket timeouts; a pause lasts longer, so clients give up on
# requests the paused process still holds and retry them on a new connection.
CLIENT_TIMEOUT_MS = 3000
PAUSE_SECONDS = (4.0, 7.0)
# How long a killed process stays down before it is started again.
DOWN_SECONDS = (0.0, 2.0)
# Quiet time between the recovery from one fault and the next fault.
GAP_SECONDS = (1.0, 4.0)
ARCHIVE_INTERVAL = "1"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Settings:
    duration: float = 600.0  # seconds of faults (the fault under way is finished)
    seed: int = 0
    acks: str = "all"  # "all": idempotent producers; "1": plain ones
    producers: int = 3
    partitions: int = 3
    rate: float = 100.0  # records per second per producer
    min_rounds: int = 0  # rounds of every fault kind to complete, whatever the duration
    page_size: int = 50  # records per Redis page: pages close and get archived quickly
    max_pages: int = 2  # archived pages Redis keeps: older offsets come from PostgreSQL
    recovery_timeout: float = 90.0  # a fault not recovered from by then is a failure
    drain_timeout: float = 150.0  # for the producers' last acks and the consumers' reads

    @property
    def idempotent(self) -> bool:
        return self.acks == "all"


@dataclass
class Fault:
    kind: str
    started: float  # monotonic
    ended: float  # the process is back (restarted and listening, or continued)
    recovered: float | None = None  # the first acknowledged produce after ``ended``

    @property
    def down(self) -> float:
        return self.ended - self.started

    @property
    def recovery(self) -> float | None:
        return None if self.recovered is None else self.recovered - self.ended


@dataclass(frozen=True, slots=True)
class Record:
    producer: str
    sequence: int
    partition: int
    offset: int


@dataclass
class Report:
    settings: Settings
    faults: list[Fault] = field(default_factory=list)
    produced: int = 0
    acknowledged: int = 0
    failed: Counter[str] = field(default_factory=Counter)  # delivery errors by name
    fatal: list[str] = field(default_factory=list)  # fatal producer errors
    log_records: int = 0  # read back from offset 0
    from_archive: int = 0  # of those, below Redis' first offset: served by PostgreSQL
    lost: list[Record] = field(default_factory=list)  # acknowledged, not in the log
    duplicated: list[tuple[str, int, int]] = field(default_factory=list)  # (producer, seq, n)
    # Each duplicate's copies: partition, offset and the producer id, epoch and sequence
    # the archive holds for it (what tells a retry the broker let through from a client
    # that re-sent under a new epoch).
    duplicate_copies: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)  # the acked offset holds another record
    acked_without_offset: int = 0  # acknowledged by implication (see ``check``)
    holes: list[str] = field(default_factory=list)  # offsets missing from the log
    unparsed: int = 0  # records in the log that are not the workload's
    archive_gaps: list[str] = field(default_factory=list)  # dropped or lost ranges recorded
    group_missed: list[Record] = field(default_factory=list)  # acked, never seen by the group
    group_redelivered: int = 0  # read again after a rebalance: at-least-once, allowed
    group_errors: Counter[str] = field(default_factory=Counter)
    group_assignments: int = 0
    commit_regressions: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)  # from the broker's or archiver's log
    unrecovered: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def problems(self) -> list[str]:
        """What makes the run fail: acknowledged records lost, or (idempotent producers)
        written twice or out of order; a log or group that lost track; a fault the
        service did not recover from."""
        found = []
        if self.lost:
            found.append(f"{len(self.lost)} acknowledged records lost, e.g. {self.lost[:5]}")
        if self.misplaced:
            found.append(f"{len(self.misplaced)} misplaced, e.g. {self.misplaced[:5]}")
        if self.holes:
            found.append(f"holes in the log: {self.holes[:5]}")
        if self.unparsed:
            found.append(f"{self.unparsed} records in the log no producer wrote")
        if self.archive_gaps:
            found.append(f"the archive recorded records as gone: {self.archive_gaps[:5]}")
        if self.group_missed:
            found.append(
                f"{len(self.group_missed)} acknowledged records the group never consumed, "
                f"e.g. {self.group_missed[:5]}"
            )
        if self.unrecovered:
            found.append(f"no produce acknowledged after: {self.unrecovered}")
        if self.settings.idempotent:
            if self.duplicated:
                found.append(f"{len(self.duplicated)} duplicated, e.g. {self.duplicated[:5]}")
            if self.reordered:
                found.append(f"{len(self.reordered)} reordered, e.g. {self.reordered[:5]}")
            if self.fatal:
                found.append(f"fatal producer errors: {self.fatal[:5]}")
        return found

    def table(self) -> str:
        """The summary: faults per kind with down and recovery times, then the counts."""
        lines = [
            f"chaos run: seed {self.settings.seed}, acks={self.settings.acks}"
            f"{' (idempotent)' if self.settings.idempotent else ''}, "
            f"{self.settings.producers} producers x {self.settings.rate:g} records/s, "
            f"{self.settings.partitions} partitions, {self.seconds:.0f} s",
            "",
            f"{'fault':<15}{'count':>6}   {'down s mean/max':<17}{'recovery s mean/p50/max':<24}",
        ]
        for kind in KINDS:
            faults = [f for f in self.faults if f.kind == kind]
            if not faults:
                lines.append(f"{kind:<15}{0:>6}")
                continue
            downs = [f.down for f in faults]
            recoveries = [f.recovery for f in faults if f.recovery is not None]
            down = f"{statistics.mean(downs):.2f}/{max(downs):.2f}"
            recovery = (
                f"{statistics.mean(recoveries):.2f}/{statistics.median(recoveries):.2f}/"
                f"{max(recoveries):.2f}"
                if recoveries
                else "-"
            )
            missing = len(faults) - len(recoveries)
            recovery += f" ({missing} never)" if missing else ""
            lines.append(f"{kind:<15}{len(faults):>6}   {down:<17}{recovery}")
        failed = ", ".join(f"{n} {name}" for name, n in self.failed.most_common()) or "none"
        group_errors = (
            ", ".join(f"{n} {name}" for name, n in self.group_errors.most_common()) or "none"
        )
        lines += [
            "",
            f"produced          {self.produced}",
            f"acknowledged      {self.acknowledged}",
            f"failed deliveries {failed}",
            f"fatal errors      {len(self.fatal)}",
            f"log from 0        {self.log_records} records, {self.from_archive} from the archive",
            f"lost              {len(self.lost)}",
            f"duplicated        {len(self.duplicated)}",
            f"reordered         {len(self.reordered)}",
            f"misplaced         {len(self.misplaced)}",
            f"acked, no offset  {self.acked_without_offset} (implied by a later batch)",
            f"holes             {len(self.holes)}",
            f"foreign records   {self.unparsed}",
            f"archive gaps      {len(self.archive_gaps)}",
            f"group missed      {len(self.group_missed)}",
            f"group redelivered {self.group_redelivered} (at-least-once: not a failure), "
            f"{self.group_assignments} assignments",
            f"group commits lost {len(self.commit_regressions)} (a stale commit may land "
            "late: redelivery, not loss)",
            f"group errors      {group_errors}",
            f"tracebacks logged {len(self.tracebacks)}",
        ]
        problems = self.problems()
        lines += ["", "PROBLEMS:", *problems] if problems else ["", "no problems"]
        lines += ["", "duplicate copies:", *self.duplicate_copies] if self.duplicate_copies else []
        return "\n".join(lines)


class Ledger:
    """What the producers were told: every acknowledged record with the time of its ack."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: list[Record] = []
        self.ack_times: list[float] = []  # monotonic, non-decreasing (taken under the lock)
        self.failed: Counter[str] = Counter()
        self.fatal: list[str] = []
        self.produced = 0

    def ack(self, record: Record) -> None:
        with self.lock:
            self.ack_times.append(time.monotonic())
            self.acked.append(record)

    def first_ack_after(self, moment: float) -> float | None:
        with self.lock:
            i = bisect.bisect_left(self.ack_times, moment)
            return self.ack_times[i] if i < len(self.ack_times) else None


# The clients' own log (timeouts, refused connections: expected here), kept out of the
# progress output; run() sends it to clients.log in the run's directory.
CLIENT_LOG = logging.getLogger("kafkaesque.chaos.clients")


def client_config(bootstrap: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "logger": CLIENT_LOG,
        "broker.address.family": "v4",
        "socket.timeout.ms": CLIENT_TIMEOUT_MS,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1000,
        "topic.metadata.refresh.interval.ms": 5000,
    }


class ProducerThread(threading.Thread):
    """One producer (key = its name) writing sequence numbers round-robin over the
    partitions at a steady rate; a fatal error is recorded and a new producer takes over
    at the next sequence number."""

    def __init__(self, name: str, bootstrap: str, settings: Settings, ledger: Ledger) -> None:
        super().__init__(name=f"producer-{name}", daemon=True)
        self.key = name
        self.bootstrap = bootstrap
        self.settings = settings
        self.ledger = ledger
        self.stop = threading.Event()  # stop producing, wait for the last acks
        self.abort = threading.Event()  # stop at once: the run failed
        self.unflushed = 0
        self._fatal = threading.Event()

    def _config(self) -> dict[str, object]:
        config = client_config(self.bootstrap)
        config |= {
            "acks": self.settings.acks,
            "enable.idempotence": self.settings.idempotent,
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 5,
            "request.timeout.ms": CLIENT_TIMEOUT_MS,
            # Long enough to outlast any fault: a record fails only if the service never
            # came back for it.
            "message.timeout.ms": int(self.settings.drain_timeout * 1000),
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            "error_cb": self._error,
            # The idempotence state machine (epoch bumps, retries) goes to clients.log.
            "debug": "eos",
        }
        return config

    def _error(self, error: KafkaError) -> None:
        if error.fatal():
            self.ledger.fatal.append(f"{self.key}: {error}")
            self._fatal.set()

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        sequence = int(message.value())
        if error is None:
            record = Record(self.key, sequence, message.partition(), message.offset())
            self.ledger.ack(record)
        else:
            with self.ledger.lock:
                self.ledger.failed[error.name()] += 1

    def run(self) -> None:
        producer = Producer(self._config())
        sequence = 0
        interval = 1 / self.settings.rate
        next_at = time.monotonic()
        while not self.stop.is_set():
            if self._fatal.is_set():  # the client gave up: its queue fails, a new one goes on
                producer.purge()
                producer.flush(10)
                self._fatal.clear()
                producer = Producer(self._config())
            try:
                producer.produce(
                    TOPIC,
                    value=b"%d" % sequence,
                    key=self.key.encode(),
                    partition=sequence % self.settings.partitions,
                    on_delivery=self._delivered,
                )
            except BufferError:
                producer.poll(0.1)
                continue
            with self.ledger.lock:
                self.ledger.produced += 1
            sequence += 1
            next_at = max(next_at + interval, time.monotonic() - 1.0)  # no burst after a stall
            while (left := next_at - time.monotonic()) > 0:
                producer.poll(left)
        deadline = time.monotonic() + self.settings.drain_timeout
        while len(producer) and not self.abort.is_set() and time.monotonic() < deadline:
            producer.flush(0.5)
        if self.abort.is_set():
            producer.purge()
        self.unflushed = producer.flush(0)


class GroupConsumerThread(threading.Thread):
    """A consumer group member reading the topic, committing offsets as it goes (auto
    commit of what poll returned), recording every record it sees. Each time partitions
    are assigned, the committed offsets it resumes from are compared with the highest
    commits the broker acknowledged: lower is a commit the group lost."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="group-consumer", daemon=True)
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.seen: Counter[tuple[str, int]] = Counter()
        self.errors: Counter[str] = Counter()
        self.assignments = 0
        self.acked_commits: dict[int, int] = {}  # partition -> highest acknowledged commit
        self.commit_regressions: list[str] = []

    def _committed(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if error is not None:
            return
        for tp in partitions:
            if tp.error is None and tp.offset >= 0:
                previous = self.acked_commits.get(tp.partition, -1)
                self.acked_commits[tp.partition] = max(previous, tp.offset)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assignments += 1
        try:
            committed = consumer.committed(partitions, timeout=10)
        except KafkaException:
            return  # the broker is away again: nothing to compare this time
        for tp in committed:
            acked = self.acked_commits.get(tp.partition, -1)
            if tp.error is None and tp.offset >= 0 and tp.offset < acked:
                self.commit_regressions.append(
                    f"partition {tp.partition}: resumed at {tp.offset}, {acked} was committed"
                )

    def run(self) -> None:
        config = client_config(self.bootstrap) | {
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 500,
            # The broker's minimum: a pause may outlast it, and the member be expired.
            "session.timeout.ms": 6000,
            "on_commit": self._committed,
        }
        consumer = Consumer(config)
        consumer.subscribe([TOPIC], on_assign=self._assigned)
        try:
            while not self.stop.is_set():
                message = consumer.poll(0.2)
                if message is None:
                    continue
                if message.error() is not None:
                    self.errors[message.error().name()] += 1
                    continue
                parsed = parse(message.key(), message.value())
                if parsed is not None:
                    with self.lock:
                        self.seen[parsed] += 1
        finally:
            consumer.close()

    def has_seen(self, records: list[Record]) -> bool:
        with self.lock:
            return all((r.producer, r.sequence) in self.seen for r in records)


def parse(key: bytes | None, value: bytes | None) -> tuple[str, int] | None:
    try:
        return key.decode(), int(value)  # type: ignore[union-attr,arg-type]
    except (AttributeError, ValueError):
        return None


class Cluster:
    """The servers of one run, in ``directory`` (PostgreSQL in a temp dir of its own),
    each of which can be killed, paused and started again on the same port and data."""

    def __init__(self, directory: Path, settings: Settings) -> None:
        self.directory = directory
        self.settings = settings
        self.redis: RedisServer | None = None
        self.pg: PostgresServer | None = None
        self.broker: Broker | None = None
        self.archiver: subprocess.Popen[bytes] | None = None
        self.paused: set[int] = set()
        self.dsn = ""

    def start(self) -> None:
        self.redis = RedisServer(self.directory / "redis", appendonly=True)
        self.check_aof()
        # The test server's settings: synchronous_commit off, so a SIGKILL takes back
        # recent commits unless the archiver makes its own durable, as it must (Redis
        # drops a page once the transaction that archived it has committed).
        self.pg = PostgresServer()
        self.pg.admin("CREATE DATABASE chaos")
        self.dsn = self.pg.dsn("chaos")
        self.broker = Broker(
            self.redis.url,
            self.directory / "broker",
            ["--archive-interval", ARCHIVE_INTERVAL],
            pg_dsn=self.dsn,
        )
        self.broker.cli(
            "create",
            TOPIC,
            "--partitions",
            str(self.settings.partitions),
            "--page-size",
            str(self.settings.page_size),
            "--max-pages",
            str(self.settings.max_pages),
        )
        self.start_archiver()

    def check_aof(self) -> None:
        """The restarted server must be the same one: AOF on, same directory and port."""
        assert self.redis is not None
        client = redis.Redis(port=self.redis.port, socket_timeout=10)
        try:
            config = client.config_get("appendonly") | client.config_get("dir")
        finally:
            client.close()
        if config["appendonly"] != "yes" or Path(config["dir"]) != self.redis.directory.resolve():
            raise RuntimeError(f"redis-server runs without its AOF: {config}")

    def start_archiver(self) -> None:
        """A second archiver beside the broker's, as cron would run one."""
        assert self.broker is not None
        command = [sys.executable, "-m", "kafkaesque", *self.broker.global_args, "archive"]
        command += ["--interval", ARCHIVE_INTERVAL, "--idle-close", "2"]
        with (self.directory / "archiver.log").open("ab") as out:
            self.archiver = subprocess.Popen(
                command,
                cwd=REPO,
                env=self.broker.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    # --- faults: each returns when the process is back --------------------------------

    def kill_broker(self, rng: random.Random) -> None:
        assert self.broker is not None
        self.broker.proc.kill()
        self.broker.proc.wait()
        time.sleep(rng.uniform(*DOWN_SECONDS))
        self.broker.start()

    def kill_redis(self, rng: random.Random) -> None:
        assert self.redis is not None
        self.redis.proc.kill()
        self.redis.proc.wait()
        time.sleep(rng.uniform(*DOWN_SECONDS))
        self.redis.start()
        self.check_aof()

    def kill_archiver(self, rng: random.Random) -> None:
        assert self.archiver is not None
        # Mid-pass most of the time: it runs a pass every second.
        self.archiver.kill()
        self.archiver.wait()
        time.sleep(rng.uniform(*DOWN_SECONDS))
        self.start_archiver()

    def kill_postgres(self, rng: random.Random) -> None:
        """SIGKILL the postmaster and every backend, then start it again on the same data
        (crash recovery) and port."""
        assert self.pg is not None
        self.pg.kill()
        time.sleep(rng.uniform(*DOWN_SECONDS))
        self.pg.start()

    def pause(self, pid: int, rng: random.Random) -> None:
        os.kill(pid, signal.SIGSTOP)
        self.paused.add(pid)
        try:
            time.sleep(rng.uniform(*PAUSE_SECONDS))
        finally:
            os.kill(pid, signal.SIGCONT)
            self.paused.discard(pid)

    def inject(self, kind: str, rng: random.Random) -> None:
        assert self.broker is not None and self.redis is not None
        match kind:
            case "broker-kill":
                self.kill_broker(rng)
            case "redis-kill":
                self.kill_redis(rng)
            case "archiver-kill":
                self.kill_archiver(rng)
            case "postgres-kill":
                self.kill_postgres(rng)
            case "broker-pause":
                self.pause(self.broker.proc.pid, rng)
            case "redis-pause":
                self.pause(self.redis.proc.pid, rng)
            case _:
                raise ValueError(kind)

    # --- reading back -------------------------------------------------------------------

    def redis_log_starts(self) -> dict[int, int]:
        """Each partition's first offset in Redis: below it, reads come from the archive."""
        assert self.redis is not None

        async def starts() -> dict[int, int]:
            log = Log(redis.asyncio.Redis.from_url(self.redis.url))  # type: ignore[union-attr]
            try:
                return {
                    p: (await log.state(TOPIC, p)).log_start
                    for p in range(self.settings.partitions)
                }
            finally:
                await log.redis.aclose()

        return asyncio.run(starts())

    def archive_state(self) -> tuple[int, list[str]]:
        """The topic's archived records, and the gaps and lost ranges the archive recorded
        (records it found gone from Redis before it held them)."""

        async def query() -> tuple[int, list[str]]:
            conn = await asyncpg.connect(self.dsn)
            try:
                count = await conn.fetchval("SELECT count(*) FROM record WHERE topic = $1", TOPIC)
                gaps = await conn.fetch(
                    "SELECT partition, first_offset, last_offset FROM dropped_range"
                    " WHERE topic = $1",
                    TOPIC,
                )
                lost = await conn.fetch("SELECT first_id, last_id FROM lost_range")
            finally:
                await conn.close()
            return count, [
                *(f"gap: partition {g[0]} offsets {g[1]}..{g[2]}" for g in gaps),
                *(f"lost with Redis: ids {r[0]}..{r[1]}" for r in lost),
            ]

        return asyncio.run(query())

    def archived_copies(self, duplicated: list[tuple[str, int, int]]) -> list[str]:
        """The archive's rows of each duplicated record: one line per copy."""

        async def query() -> list[str]:
            conn = await asyncpg.connect(self.dsn)
            try:
                lines = []
                for producer, sequence, _ in duplicated:
                    rows = await conn.fetch(
                        'SELECT partition, "offset", id, producer_id, producer_epoch,'
                        " producer_sequence, archived_at FROM record"
                        " WHERE topic = $1 AND key = $2 AND value = $3 ORDER BY id",
                        TOPIC,
                        producer.encode(),
                        b"%d" % sequence,
                    )
                    lines += [f"{producer} {sequence}: {dict(row)}" for row in rows]
                return lines
            finally:
                await conn.close()

        return asyncio.run(query()) if duplicated else []

    def tracebacks(self) -> list[str]:
        found = []
        logs = [self.directory / "archiver.log"]
        logs += [self.broker.stderr_path] if self.broker else []
        for path in logs:
            if path.exists():
                text = path.read_text(errors="replace")
                for part in text.split("Traceback")[1:]:
                    found.append(f"{path.name}: Traceback{part[:2000]}")
        return found

    def close(self) -> None:
        """Stop everything, whatever state it was left in."""
        for pid in list(self.paused):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if self.archiver is not None and self.archiver.poll() is None:
            self.archiver.kill()
            self.archiver.wait()
        if self.broker is not None:
            self.broker.stop()
        if self.redis is not None and self.redis.proc.poll() is None:
            self.redis.stop()
        if self.pg is not None:
            self.pg.destroy()


@contextmanager
def running_cluster(directory: Path, settings: Settings) -> Iterator[Cluster]:
    cluster = Cluster(directory, settings)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


def read_log(bootstrap: str, partitions: int, timeout: float) -> dict[int, dict[int, tuple]]:
    """Every record of the topic from offset 0 to the end, by a fresh consumer without a
    group: {partition: {offset: (key, value)}}."""
    consumer = Consumer(
        client_config(bootstrap) | {"group.id": "chaos-verify", "enable.auto.commit": False}
    )
    try:
        ends = {}
        for p in range(partitions):
            _, ends[p] = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
        log: dict[int, dict[int, tuple]] = {p: {} for p in range(partitions)}
        deadline = time.monotonic() + timeout
        done = {p for p in range(partitions) if ends[p] == 0}
        while len(done) < partitions and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            p = message.partition()
            log[p][message.offset()] = (message.key(), message.value())
            if message.offset() >= ends[p] - 1:
                done.add(p)
        return log
    finally:
        consumer.close()


def check(
    report: Report,
    acked: list[Record],
    log: dict[int, dict[int, tuple]],
    group_seen: Counter[tuple[str, int]],
) -> None:
    """Fill the report's counts from the acknowledged records, the log read back and what
    the group consumed (a record read more often than the log holds it was redelivered)."""
    where: dict[tuple[str, int], list[Record]] = defaultdict(list)  # (producer, seq) -> places
    for p, records in log.items():
        offsets = sorted(records)
        missing = [o for o in range(offsets[-1] + 1) if o not in records] if offsets else []
        if missing:
            report.holes.append(f"partition {p}: {len(missing)} offsets from {missing[0]}")
        last: dict[str, tuple[int, int]] = {}  # producer -> (sequence, offset)
        for offset in offsets:
            parsed = parse(*records[offset])
            if parsed is None:
                report.unparsed += 1
                continue
            producer, sequence = parsed
            where[parsed].append(Record(producer, sequence, p, offset))
            if len(where[parsed]) > 1:
                continue  # a duplicate, counted as such; order is that of first copies
            before = last.get(producer)
            if before is not None and sequence < before[0]:
                report.reordered.append(
                    f"{producer} partition {p}: {before[0]} at {before[1]}, then {sequence} "
                    f"at {offset}"
                )
            last[producer] = (sequence, offset)
    report.log_records = sum(len(records) for records in log.values())
    report.duplicated = [(k[0], k[1], len(v)) for k, v in where.items() if len(v) > 1]
    report.group_redelivered = sum(
        max(0, n - len(where.get(key, ()))) for key, n in group_seen.items()
    )
    for record in acked:
        places = where.get((record.producer, record.sequence))
        if not places:
            report.lost.append(record)
        elif record.offset is None:
            # librdkafka acknowledges a batch whose own response was lost once a later
            # batch of the producer succeeded (the broker's sequence check implies it was
            # written), without an offset: found above, so not lost; nothing to compare.
            report.acked_without_offset += 1
        elif record.offset not in (r.offset for r in places if r.partition == record.partition):
            report.misplaced.append(f"{record} holds {log[record.partition].get(record.offset)}")


def run(directory: Path, settings: Settings, progress: Progress = lambda line: None) -> Report:
    """One chaos run in ``directory``: start everything, produce and consume while
    injecting faults for ``settings.duration`` seconds, recover, read back, check."""
    rng = random.Random(settings.seed)
    report = Report(settings)
    directory.mkdir(parents=True, exist_ok=True)
    client_log = logging.FileHandler(directory / "clients.log")
    client_log.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    CLIENT_LOG.addHandler(client_log)
    CLIENT_LOG.setLevel(logging.DEBUG)
    CLIENT_LOG.propagate = False
    try:
        return _run(directory, settings, rng, report, progress)
    finally:
        CLIENT_LOG.removeHandler(client_log)
        client_log.close()


def _run(
    directory: Path, settings: Settings, rng: random.Random, report: Report, progress: Progress
) -> Report:
    ledger = Ledger()
    began = time.monotonic()
    with running_cluster(directory, settings) as cluster:
        assert cluster.broker is not None
        bootstrap = cluster.broker.bootstrap
        producers = [
            ProducerThread(f"p{i}", bootstrap, settings, ledger) for i in range(settings.producers)
        ]
        group = GroupConsumerThread(bootstrap)
        for thread in [*producers, group]:
            thread.start()
        drained = False
        try:
            _wait(lambda: ledger.first_ack_after(0) is not None, 60, "a first ack")
            _inject_faults(cluster, settings, rng, ledger, report, progress)
            progress("faults over; draining the producers")
            for producer in producers:
                producer.stop.set()
            for producer in producers:
                producer.join(settings.drain_timeout + 30)
            acked = list(ledger.acked)
            progress(f"{len(acked)} acknowledged; waiting for the group to consume them")
            with suppress(TimeoutError):
                _wait(lambda: group.has_seen(acked), settings.drain_timeout, "the group", 0.5)
            drained = True
        finally:
            for producer in producers:
                if not drained:  # failing: do not wait for acks that may never come
                    producer.abort.set()
                producer.stop.set()
            group.stop.set()
            for thread in [*producers, group]:
                thread.join(60)
        report.produced = ledger.produced
        report.acknowledged = len(acked)
        report.failed = ledger.failed
        unflushed = sum(producer.unflushed for producer in producers)
        if unflushed:
            report.failed["never answered"] += unflushed
        report.fatal = ledger.fatal
        report.group_errors = group.errors
        report.group_assignments = group.assignments
        report.commit_regressions = group.commit_regressions
        report.group_missed = [r for r in acked if (r.producer, r.sequence) not in group.seen]
        progress("reading the log back from offset 0")
        starts = cluster.redis_log_starts()
        log = read_log(bootstrap, settings.partitions, settings.drain_timeout)
        report.from_archive = sum(
            1 for p, records in log.items() for offset in records if offset < starts[p]
        )
        check(report, acked, log, group.seen)
        report.tracebacks = cluster.tracebacks()
        archived, report.archive_gaps = cluster.archive_state()
        report.duplicate_copies = cluster.archived_copies(report.duplicated[:5])
        progress(f"archive holds {archived} records of the topic")
    report.seconds = time.monotonic() - began
    return report


def _inject_faults(
    cluster: Cluster,
    settings: Settings,
    rng: random.Random,
    ledger: Ledger,
    report: Report,
    progress: Progress,
) -> None:
    """Faults one after another in rounds of every kind in random order, until the
    duration is over and ``min_rounds`` rounds are complete. Each fault is followed by a
    wait for the first acknowledged produce (its recovery) and a quiet gap."""
    deadline = time.monotonic() + settings.duration
    rounds = 0
    while True:
        kinds = list(KINDS)
        rng.shuffle(kinds)
        for kind in kinds:
            if time.monotonic() >= deadline and rounds >= settings.min_rounds:
                return
            started = time.monotonic()
            cluster.inject(kind, rng)
            fault = Fault(kind, started, time.monotonic())
            report.faults.append(fault)
            with suppress(TimeoutError):
                _wait(
                    lambda: ledger.first_ack_after(fault.ended) is not None,  # noqa: B023
                    settings.recovery_timeout,
                    f"recovery from {kind}",
                )
            fault.recovered = ledger.first_ack_after(fault.ended)
            if fault.recovery is None:
                report.unrecovered.append(kind)
            recovery = "never" if fault.recovery is None else f"{fault.recovery:.2f} s"
            progress(
                f"{len(report.faults):4d} {kind:<14} down {fault.down:5.2f} s, "
                f"recovered in {recovery}; {len(ledger.acked)} acknowledged"
            )
            time.sleep(rng.uniform(*GAP_SECONDS))
        rounds += 1


def _wait(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(interval)
