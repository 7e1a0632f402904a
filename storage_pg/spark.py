"""Spark jobs over the archive: an incremental Parquet export and a report.

Both read the PostgreSQL ``record`` table through Spark's JDBC source, and only the
consistent cut the archive guarantees: every record with ``id <= archive_watermark.id`` is
archived and there are no gaps below it, so a run reads the watermark once and never looks
above it. The read is split by ``id`` ranges across ``numPartitions`` JDBC connections;
``lowerBound``/``upperBound`` are the first and last id actually in the cut (one index probe
each), so the stride covers the cut and nothing else, and ``id > last AND id <= watermark`` is
pushed down into every partition's query (Spark's first and last partitions are otherwise
open-ended).

Nothing here runs Python on the executors (no UDFs): the executors need the JVM, network
access to PostgreSQL and the JDBC driver jar, which Spark ships to them itself (``spark.jars``
is served from the driver). The export's output directory is any URI Spark and Hadoop can
write (``file:``, ``hdfs://``, ``s3a://``, ...); with a cluster it must be a shared one.

The export's state and its crash safety
---------------------------------------
The dataset lives at the root of the output directory, Hive-style:
``OUT/topic=T/date=YYYY-MM-DD/ids-FROM-TO-part-....parquet`` (date of the record timestamp
in UTC; ``date=__HIVE_DEFAULT_PARTITION__`` holds records without one). Bookkeeping is kept
under ``OUT/_kafkaesque_export/``, which Spark, pyarrow and friends skip when reading
``OUT`` (a leading underscore):

- ``staging/FROM-TO/``: a run's Parquet as Spark's own committer wrote it;
- ``commit-TO.json``: the run's commit record, ``{"from_id", "to_id", "rows", ...}``.

A run (1) writes ids FROM..TO into ``staging/FROM-TO``, (2) writes ``commit-TO.json``
(under a temporary name, then renamed: a rename to a new name is atomic on every Hadoop file
system we care about), which is the commit point, (3) moves each staged file into the
dataset, renamed ``ids-FROM-TO-<Spark's name>``, (4) deletes the staging directory and the
older commit records. Every run starts by recovering: a staging directory with a commit
record is rolled forward (its remaining files moved, step 3 again: moves are idempotent
because a moved file has left the staging directory), one without a commit record is an
aborted run and is deleted. The last exported id is then the highest commit record's TO.

So a crash anywhere neither duplicates nor skips: before the commit record nothing reached
the dataset and the rerun exports the same range again; after it the rerun finishes the
moves. We chose staging + rename over naming files by id range in place and reconciling
on start because Spark does not let a job choose its file names, and because readers of the
dataset then never see a half-written Spark job (only, during step 3, part of a committed
run's files: rows are only ever added). The file names still carry the id range, so a lost
state directory can be rebuilt by hand. One export per output directory at a time (run it
from cron under ``flock``, as the archiver's cron script does).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import getpass
import glob
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

JDBC_DRIVER = "org.postgresql.Driver"
JAR_ENV = "KAFKAESQUE_JDBC_JAR"
# Where Debian's libpostgresql-jdbc-java and Maven-style installs put the driver.
KNOWN_JARS = (
    "/usr/share/java/postgresql.jar",
    "/usr/share/java/postgresql-jdbc4.jar",
    "/usr/share/maven-repo/org/postgresql/postgresql/*/postgresql-*.jar",
    "/usr/local/share/java/postgresql*.jar",
    "/opt/homebrew/share/java/postgresql*.jar",
)
STATE_DIR = "_kafkaesque_export"
FETCH_SIZE = 10_000  # rows per round trip; also makes pgjdbc stream instead of buffer all
ROWS_PER_PARTITION_MIN = 50_000  # don't split a cut into JDBC partitions smaller than this
ROWS_PER_PARTITION_MAX = 2_000_000  # more partitions than cores once they would be bigger
TOP_KEYS = 10
RECORD_COLUMNS = (
    "id",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "key",
    "value",
    "headers",
    "producer_id",
    "producer_epoch",
    "producer_sequence",
    "archived_at",
)


class SparkJobError(RuntimeError):
    """A Spark job over the archive failed; the message is one line meant for people."""


class JdbcDriverMissing(SparkJobError):
    """The PostgreSQL JDBC driver jar is not where we (or Spark) can find it."""


class ArchiveUnreachable(SparkJobError):
    """PostgreSQL refused or never answered (host, port, password, database name)."""


# --- DSN -> JDBC ---------------------------------------------------------------------

# libpq URI query parameters with a pgjdbc connection property of their own.
_PARAMS = {
    "sslmode": "sslmode",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "sslrootcert": "sslrootcert",
    "sslpassword": "sslpassword",
    "application_name": "ApplicationName",
    "connect_timeout": "connectTimeout",
    "options": "options",
    "channel_binding": "channelBinding",
}


@dataclass(frozen=True)
class JdbcTarget:
    """A JDBC URL (no password in it: Spark prints URLs in plans and errors) and the
    connection properties to go with it."""

    url: str
    properties: dict[str, str]
    where: str  # host:port/db, for messages

    def options(self) -> dict[str, str]:
        return {"url": self.url, **self.properties}


def jdbc_target(dsn: str) -> JdbcTarget:
    """Build the JDBC URL and properties from a libpq/asyncpg URI
    (``postgresql://user:pass@host:port/db?sslmode=require``). Several ``host:port``
    separated by commas are kept (pgjdbc fails over the same way). Missing parts default as
    libpq does: PGUSER/PGPASSWORD/PGHOST/PGPORT/PGDATABASE, then localhost:5432, the OS user,
    database = user name."""
    match = re.fullmatch(r"(postgres(?:ql)?)://([^/?#]*)(?:/([^?#]*))?(?:\?([^#]*))?", dsn.strip())
    if match is None:
        raise SparkJobError("the DSN must look like postgresql://user:password@host:port/db")
    _, netloc, path, query = match.groups()
    params = dict(parse_qsl(query or "", keep_blank_values=True))
    user = password = None
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        user, _, password = userinfo.partition(":")
        user, password = unquote(user) or None, unquote(password) if _ else None
    user = params.pop("user", None) or user or os.environ.get("PGUSER") or getpass.getuser()
    password = params.pop("password", None) or password or os.environ.get("PGPASSWORD")
    database = unquote(path or "") or params.pop("dbname", None) or os.environ.get("PGDATABASE")
    database = database or user
    default_port = params.pop("port", None) or os.environ.get("PGPORT") or "5432"
    hosts = []
    host_list = params.pop("host", None) or unquote(netloc) or os.environ.get("PGHOST", "")
    for item in host_list.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("/"):
            raise SparkJobError(
                f"JDBC cannot use the unix socket {item}: give PostgreSQL's TCP host and port"
            )
        host, port = item, default_port
        m = re.fullmatch(r"(\[[^\]]+\]|[^:]+)(?::(\d*))?", item)
        if m is None:
            raise SparkJobError(f"bad host in DSN: {item!r}")
        host, port = m.group(1), m.group(2) or default_port
        hosts.append(f"{host}:{port}")
    if not hosts:
        hosts = [f"localhost:{default_port}"]
    properties = {"driver": JDBC_DRIVER, "user": user, "ApplicationName": "kafkaesque-spark"}
    if password is not None:
        properties["password"] = password
    for name, value in params.items():
        if name in _PARAMS:
            properties[_PARAMS[name]] = value
        # anything else (target_session_attrs, passfile, ...) has no JDBC twin: ignored
    properties.setdefault("connectTimeout", "10")
    where = f"{','.join(hosts)}/{database}"
    url = f"jdbc:postgresql://{','.join(hosts)}/{_jdbc_quote(database)}"
    return JdbcTarget(url, properties, where)


def _jdbc_quote(database: str) -> str:
    return re.sub(
        r"[^A-Za-z0-9._~-]", lambda m: "".join(f"%{b:02X}" for b in m[0].encode()), database
    )


# --- the driver jar and the session -----------------------------------------------------


def find_jdbc_jar() -> str:
    """The PostgreSQL JDBC driver: $KAFKAESQUE_JDBC_JAR, else the first known install path.
    Raises JdbcDriverMissing with what to do."""
    configured = os.environ.get(JAR_ENV)
    if configured:
        if not os.path.isfile(configured):
            raise JdbcDriverMissing(f"{JAR_ENV}={configured}: no such file")
        return configured
    for pattern in KNOWN_JARS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[-1]
    raise JdbcDriverMissing(
        "the PostgreSQL JDBC driver is missing: install it (Debian: apt-get install "
        f"libpostgresql-jdbc-java) or set {JAR_ENV} to the jar's path"
    )


# Quiet log4j2 set-up for the JVMs we start: warnings and errors on stderr, one line each
# (the exception's message, not its stack trace; failures reach the user as SparkJobError).
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%throwable{short.message}
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = error
"""


def spark_session(
    master: str = "local[*]", app_name: str = "kafkaesque", config: Mapping[str, str] | None = None
) -> SparkSession:
    """The active Spark session (spark-submit's, or a test's), else a new one on ``master``
    with the JDBC driver, UTC as the session time zone and the console kept quiet; ``config``:
    more Spark settings for a new session."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkJobError("PySpark is not installed: pip install 'kafkaesque[spark]'") from None
    active = _active_session()
    if active is not None:
        _ensure_driver(active)
        _session_settings(active)
        return active
    jar = find_jdbc_jar()
    builder = SparkSession.builder.appName(app_name).master(master)
    builder = builder.config("spark.jars", jar)
    for name, value in (config or {}).items():
        builder = builder.config(name, value)
    builder = builder.config("spark.ui.showConsoleProgress", str(sys.stderr.isatty()).lower())
    if master.startswith("local"):
        builder = builder.config("spark.ui.enabled", "false")
        # everything runs in this process: bind to loopback (and skip Spark's warning
        # about the host name resolving to it)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):  # we start the JVM: configure its logging
        fd, log_conf = tempfile.mkstemp(prefix="kafkaesque-log4j2-", suffix=".properties")
        with os.fdopen(fd, "w") as fh:
            fh.write(_LOG4J2)
        builder = builder.config(
            "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_conf}"
        )
    else:
        log_conf = None
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        raise SparkJobError(f"cannot start Spark on {master}: {_first_line(exc)}") from None
    finally:
        if log_conf:
            with contextlib.suppress(OSError):
                os.unlink(log_conf)
    spark.sparkContext.setLogLevel("WARN")
    _ensure_driver(spark, jar)
    _session_settings(spark)
    return spark


def _session_settings(spark: SparkSession) -> None:
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # dates and hours are UTC
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")


def _ensure_driver(spark: SparkSession, jar: str | None = None) -> None:
    """Make sure the JDBC driver loads on the driver and reaches the executors. Needed for a
    context we did not launch ourselves (spark-submit without --jars): spark.jars set on a
    context created inside an already running JVM reaches the executors only, so the jar is
    also added to the driver's class loader."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        loader.loadClass(JDBC_DRIVER)
        return
    except Exception:
        pass
    jar = jar or find_jdbc_jar()
    try:
        loader.addURL(jvm.java.io.File(jar).toURI().toURL())
        loader.loadClass(JDBC_DRIVER)
    except Exception:
        raise JdbcDriverMissing(
            f"cannot load the JDBC driver from {jar}: pass --jars {jar} to spark-submit"
        ) from None
    if os.path.basename(jar) not in spark.sparkContext.getConf().get("spark.jars", ""):
        spark.sparkContext.addJar(jar)


@contextlib.contextmanager
def _session(master: str, spark: SparkSession | None, app_name: str) -> Iterator[SparkSession]:
    """The given session, else the active one, else a new one that is stopped afterwards."""
    if spark is not None:
        _session_settings(spark)
        yield spark
        return
    from_before = _active_session()
    session = spark_session(master, app_name)
    try:
        yield session
    finally:
        if from_before is None:
            session.stop()


def _active_session() -> SparkSession | None:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    return SparkSession.getActiveSession()


# --- errors -------------------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


def _java_chain(exc: BaseException) -> list[tuple[str, str, str | None]]:
    """(class name, message, SQL state) of the Java exception behind exc and its causes."""
    throwable = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    chain: list[tuple[str, str, str | None]] = []
    try:
        while throwable is not None and len(chain) < 20:
            name = throwable.getClass().getName()
            state = throwable.getSQLState() if name.endswith("PSQLException") else None
            chain.append((name, str(throwable.getMessage() or "").strip(), state))
            throwable = throwable.getCause()
    except Exception:  # the JVM is gone, or not a Java object after all
        pass
    return chain


def _translate(exc: BaseException, target: JdbcTarget) -> SparkJobError:
    chain = _java_chain(exc)
    text = str(exc) + "\n" + "\n".join(f"{name}: {message}" for name, message, _ in chain)
    if f"ClassNotFoundException: {JDBC_DRIVER}" in text or "No suitable driver" in text:
        return JdbcDriverMissing(
            f"the PostgreSQL JDBC driver is not on Spark's class path: set {JAR_ENV} or "
            "pass --jars to spark-submit"
        )
    for name, message, state in chain:
        message = message.splitlines()[0] if message else name
        if name == "org.postgresql.util.PSQLException":
            if state and (state[:2] in ("08", "28") or state == "3D000"):
                return ArchiveUnreachable(f"cannot reach the archive at {target.where}: {message}")
            if state == "42P01":  # undefined table
                return SparkJobError(
                    f"no kafkaesque archive in {target.where} ({message}): run the archiver first"
                )
            return SparkJobError(f"archive query failed: {message}")
        if name.startswith("java.net.") or name == "java.sql.SQLTimeoutException":
            return ArchiveUnreachable(f"cannot reach the archive at {target.where}: {message}")
    return SparkJobError(f"Spark job failed: {_first_line(exc)}")


@contextlib.contextmanager
def _spark_errors(target: JdbcTarget) -> Iterator[None]:
    """Turn the JVM's exceptions (Py4J or PySpark's captured ones) into one-line errors."""
    try:
        yield
    except SparkJobError:
        raise
    except Exception as exc:
        module = type(exc).__module__ or ""
        if module.startswith(("py4j", "pyspark")):
            raise _translate(exc, target) from None
        raise


# --- the cut --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cut:
    """The ids a run reads: ``after < id <= watermark``; first/last are the lowest and
    highest id actually archived in that range (None when there is none)."""

    after: int
    watermark: int
    first: int | None
    last: int | None

    @property
    def empty(self) -> bool:
        return self.first is None


def archive_cut(spark: SparkSession, target: JdbcTarget, after: int = 0) -> Cut:
    """Read the watermark and the bounds of the ids above ``after`` below it, in one query."""
    after = int(after)
    query = f"""
        SELECT w.id AS watermark,
               (SELECT min(id) FROM record WHERE id > {after} AND id <= w.id) AS first_id,
               (SELECT max(id) FROM record WHERE id > {after} AND id <= w.id) AS last_id
        FROM (SELECT coalesce(max(id), 0) AS id FROM archive_watermark) AS w
    """
    with _spark_errors(target):
        rows = spark.read.format("jdbc").options(**target.options(), query=query).load().collect()
    watermark, first, last = rows[0]
    return Cut(after, int(watermark), first, last)


def jdbc_partitions(spark: SparkSession, cut: Cut) -> int:
    """How many JDBC partitions to split a cut into: one per core the master offers
    (more when they would exceed ROWS_PER_PARTITION_MAX ids), never below
    ROWS_PER_PARTITION_MIN ids each."""
    if cut.empty:
        return 1
    span = cut.last - cut.first + 1  # type: ignore[operator]
    wanted = max(spark.sparkContext.defaultParallelism, math.ceil(span / ROWS_PER_PARTITION_MAX))
    return max(1, min(wanted, math.ceil(span / ROWS_PER_PARTITION_MIN)))


def read_cut(
    spark: SparkSession,
    target: JdbcTarget,
    cut: Cut,
    table: str = "record",
    partitions: int | None = None,
) -> DataFrame:
    """The archive's rows of ``cut`` as a DataFrame read in ``id`` ranges. ``table`` may be a
    parenthesised subquery over ``record`` (with an ``id`` column) to project in PostgreSQL."""
    if cut.empty:
        raise ValueError("empty cut")
    n = partitions or jdbc_partitions(spark, cut)
    reader = spark.read.format("jdbc").options(**target.options())
    reader = reader.options(
        dbtable=table,
        partitionColumn="id",
        lowerBound=str(cut.first),
        upperBound=str(cut.last + 1),  # type: ignore[operator]
        numPartitions=str(n),
        fetchsize=str(FETCH_SIZE),
    )
    with _spark_errors(target):
        df = reader.load()
    return df.where(f"id > {cut.after} AND id <= {cut.watermark}")


# --- export -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportSummary:
    rows: int
    from_id: int  # the run covered from_id <= id <= to_id (empty when to_id < from_id)
    to_id: int
    seconds: float

    def format(self) -> str:
        if self.to_id < self.from_id:
            return f"nothing new to export (archive watermark {self.to_id:,})"
        return (
            f"exported {self.rows:,} records (ids {self.from_id:,}..{self.to_id:,}) "
            f"in {self.seconds:.1f}s"
        )


class _Fs:
    """The few Hadoop FileSystem calls the export's bookkeeping needs (so it works on any
    URI Spark can write, not only the driver's local disk)."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.jvm = spark._jvm  # type: ignore[attr-defined]
        conf = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
        path = self.jvm.org.apache.hadoop.fs.Path(root)
        self.fs = path.getFileSystem(conf)
        self.root = self.fs.makeQualified(path)

    def path(self, *parts: str) -> Any:
        p = self.root
        for part in parts:
            p = self.jvm.org.apache.hadoop.fs.Path(p, part)
        return p

    def exists(self, path: Any) -> bool:
        return bool(self.fs.exists(path))

    def children(self, path: Any) -> list[Any]:
        if not self.fs.exists(path):
            return []
        return [status.getPath() for status in self.fs.listStatus(path)]

    def files(self, path: Any) -> list[Any]:
        """Every data file below path (Spark's markers and hidden files left out)."""
        found, it = [], self.fs.listFiles(path, True)
        while it.hasNext():
            p = it.next().getPath()
            if not p.getName().startswith(("_", ".")):
                found.append(p)
        return found

    def read_text(self, path: Any) -> str:
        stream = self.fs.open(path)
        try:
            reader = self.jvm.java.io.BufferedReader(
                self.jvm.java.io.InputStreamReader(stream, "UTF-8")
            )
            lines = []
            while (line := reader.readLine()) is not None:
                lines.append(line)
            return "\n".join(lines)
        finally:
            stream.close()

    def write_new(self, path: Any, text: str) -> None:
        """Create path with text, all or nothing: written under a temporary name, renamed."""
        tmp = self.jvm.org.apache.hadoop.fs.Path(path.getParent(), "." + path.getName() + ".tmp")
        stream = self.fs.create(tmp, True)
        try:
            stream.write(bytearray(text.encode()))
        finally:
            stream.close()
        if not self.fs.rename(tmp, path):
            raise SparkJobError(f"cannot rename {tmp} to {path}")

    def move(self, src: Any, dst: Any) -> None:
        self.fs.mkdirs(dst.getParent())
        if not self.fs.rename(src, dst):
            raise SparkJobError(f"cannot move {src} to {dst}")

    def delete(self, path: Any) -> None:
        self.fs.delete(path, True)


@dataclass(frozen=True)
class _Commit:
    from_id: int
    to_id: int
    rows: int
    path: Any = field(compare=False, default=None)


class ExportState:
    """The export's bookkeeping under OUT/_kafkaesque_export (see the module docstring)."""

    def __init__(self, fs: _Fs) -> None:
        self.fs = fs
        self.dir = fs.path(STATE_DIR)

    def staging(self, from_id: int, to_id: int) -> Any:
        return self.fs.path(STATE_DIR, "staging", f"{from_id}-{to_id}")

    def commits(self) -> list[_Commit]:
        found = []
        for p in self.fs.children(self.dir):
            name = p.getName()
            if re.fullmatch(r"commit-\d+\.json", name):
                data = json.loads(self.fs.read_text(p))
                found.append(_Commit(data["from_id"], data["to_id"], data["rows"], p))
            elif name.startswith("."):  # a commit record's temporary file: never committed
                self.fs.delete(p)
        return sorted(found, key=lambda c: c.to_id)

    def recover(self) -> int:
        """Finish committed runs, drop aborted ones; return the last exported id."""
        commits = self.commits()
        by_range = {(c.from_id, c.to_id): c for c in commits}
        for staged in self.fs.children(self.fs.path(STATE_DIR, "staging")):
            m = re.fullmatch(r"(\d+)-(\d+)", staged.getName())
            key = (int(m.group(1)), int(m.group(2))) if m else None
            if key in by_range:
                self.publish(*key)  # committed, not yet (fully) moved: roll forward
            else:
                self.fs.delete(staged)  # never committed: the rerun exports it again
        for c in commits[:-1]:
            self.fs.delete(c.path)
        return commits[-1].to_id if commits else 0

    def commit(self, from_id: int, to_id: int, rows: int) -> None:
        record = {
            "from_id": from_id,
            "to_id": to_id,
            "rows": rows,
            "committed_at": datetime.datetime.now(datetime.UTC).isoformat(),
        }
        self.fs.write_new(self.fs.path(STATE_DIR, f"commit-{to_id:020d}.json"), json.dumps(record))

    def publish(self, from_id: int, to_id: int) -> None:
        """Move a committed run's staged files into the dataset (idempotent), then drop the
        staging directory."""
        staging = self.staging(from_id, to_id)
        if not self.fs.exists(staging):
            return
        prefix = len(staging.toUri().getPath().rstrip("/")) + 1
        for src in self.fs.files(staging):
            relative = src.toUri().getPath()[prefix:]  # topic=T/date=D/part-....parquet
            directory, _, name = relative.rpartition("/")
            dst = self.fs.path(directory, f"ids-{from_id}-{to_id}-{name}")
            _move(self.fs, src, dst)
        self.fs.delete(staging)


def _move(fs: _Fs, src: Any, dst: Any) -> None:
    fs.move(src, dst)  # a seam for the crash tests


def export(
    dsn: str,
    out_dir: str,
    master: str = "local[*]",
    *,
    spark: SparkSession | None = None,
    partitions: int | None = None,
) -> ExportSummary:
    """Export the records archived since the last run (up to the watermark) as Parquet under
    ``out_dir``, partitioned by topic and date. Reruns neither skip nor duplicate, also after a
    crash (see the module docstring). ``spark``: a session to use (else the active one, else a
    new one on ``master``, stopped at the end); ``partitions``: JDBC partitions (default: see
    jdbc_partitions)."""
    started = time.perf_counter()
    target = jdbc_target(dsn)
    with _session(master, spark, "kafkaesque export") as session:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        with _spark_errors(target):
            fs = _Fs(session, out_dir)
        state = ExportState(fs)
        last = state.recover()
        cut = archive_cut(session, target, last)
        if cut.watermark < last:
            raise SparkJobError(
                f"the archive's watermark ({cut.watermark:,}) is below the last exported id "
                f"({last:,}): is {out_dir} an export of another archive?"
            )
        from_id, to_id = last + 1, cut.watermark
        if cut.watermark == last:
            return ExportSummary(0, from_id, last, time.perf_counter() - started)
        rows = 0
        if not cut.empty:
            df = read_cut(session, target, cut, partitions=partitions)
            df = df.withColumn("date", F.to_date("timestamp"))
            observation = Observation("export")
            df = df.observe(observation, F.count(F.lit(1)).alias("rows"))
            writer = df.sortWithinPartitions("topic", "date", "id").write.mode("overwrite")
            staging = state.staging(from_id, to_id).toString()
            with _spark_errors(target):
                writer.partitionBy("topic", "date").parquet(staging)
            rows = int(observation.get["rows"])
        state.commit(from_id, to_id, rows)
        state.publish(from_id, to_id)
        state.recover()  # prunes the older commit records
        return ExportSummary(rows, from_id, to_id, time.perf_counter() - started)


def export_schema() -> Any:
    """The exported dataset's schema, partition columns last (topic stays a string even
    when a topic's name looks like a number)."""
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("partition", T.IntegerType()),
            T.StructField("offset", T.LongType()),
            T.StructField("timestamp", T.TimestampType()),
            T.StructField("key", T.BinaryType()),
            T.StructField("value", T.BinaryType()),
            T.StructField("headers", T.StringType()),
            T.StructField("producer_id", T.LongType()),
            T.StructField("producer_epoch", T.ShortType()),
            T.StructField("producer_sequence", T.IntegerType()),
            T.StructField("archived_at", T.TimestampType()),
            T.StructField("topic", T.StringType()),
            T.StructField("date", T.DateType()),
        ]
    )


def read_export(spark: SparkSession, out_dir: str) -> DataFrame:
    """The exported dataset as a DataFrame."""
    return spark.read.schema(export_schema()).parquet(out_dir)


# --- report ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicTotal:
    topic: str
    records: int
    bytes: int  # key + value lengths


@dataclass(frozen=True)
class HourlyRow:
    topic: str
    hour: datetime.datetime  # UTC, start of the hour
    records: int
    bytes: int


@dataclass(frozen=True)
class TopKey:
    topic: str
    rank: int
    key: bytes
    records: int


@dataclass(frozen=True)
class TopicLag:
    """Produce-to-archive lag (archived_at - timestamp) in seconds, over the topic's records
    with a timestamp; p50/p99 are values of the data (nearest rank, as percentile_disc)."""

    topic: str
    records: int
    p50: float
    p99: float
    max: float


@dataclass
class Report:
    watermark: int
    topics: list[TopicTotal]
    hourly: list[HourlyRow]
    top_keys: list[TopKey]
    lag: list[TopicLag]
    seconds: float = 0.0
    png: str | None = None

    def format(self) -> str:
        """The report as aligned text tables."""
        records = sum(t.records for t in self.topics)
        size = sum(t.bytes for t in self.topics)
        out = [
            f"archive up to id {self.watermark:,} (the watermark): {records:,} records, "
            f"{_human_bytes(size)} of keys and values in {len(self.topics)} topics",
        ]
        if not self.topics:
            return out[0]
        out += ["", "Per topic"]
        out += _table(
            ["topic", "records", "bytes"],
            [[t.topic, f"{t.records:,}", f"{t.bytes:,}"] for t in self.topics],
        )
        out += ["", "Records and bytes per topic per hour (UTC)"]
        out += _table(
            ["topic", "hour", "records", "bytes"],
            [
                [h.topic, h.hour.strftime("%Y-%m-%d %H:00"), f"{h.records:,}", f"{h.bytes:,}"]
                for h in self.hourly
            ],
        )
        out += ["", "Top keys per topic"]
        out += _table(
            ["topic", "rank", "key", "records"],
            [[k.topic, str(k.rank), _show_key(k.key), f"{k.records:,}"] for k in self.top_keys],
        )
        out += ["", "Produce-to-archive lag per topic (seconds)"]
        out += _table(
            ["topic", "records", "p50", "p99", "max"],
            [
                [
                    lag.topic,
                    f"{lag.records:,}",
                    f"{lag.p50:.3f}",
                    f"{lag.p99:.3f}",
                    f"{lag.max:.3f}",
                ]
                for lag in self.lag
            ],
        )
        if self.png:
            out += ["", f"chart: {self.png}"]
        return "\n".join(out)


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    raise AssertionError


def _show_key(key: bytes, width: int = 40) -> str:
    try:
        text = key.decode()
        if text.isprintable():
            return text if len(text) <= width else text[: width - 1] + "…"
    except UnicodeDecodeError:
        pass
    shown = "0x" + key.hex()
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return ["  (none)"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = [i > 0 and all(_numeric(r[i]) for r in rows) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        parts = [
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
        ]
        return "  " + "  ".join(parts).rstrip()

    return [line(header), *(line(r) for r in rows)]


def _numeric(cell: str) -> bool:
    return bool(re.fullmatch(r"-?[\d,]+(\.\d+)?", cell))


def _utc(micros: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
        microseconds=micros
    )


# The report's projection, done in PostgreSQL: values never cross the wire, only lengths.
_REPORT_TABLE = """(SELECT id, topic, "timestamp", archived_at, key,
       coalesce(octet_length(key), 0) + coalesce(octet_length(value), 0) AS size
  FROM record) AS r"""


def report(
    dsn: str,
    png: str | None = None,
    master: str = "local[*]",
    *,
    spark: SparkSession | None = None,
    top: int = TOP_KEYS,
    partitions: int | None = None,
) -> Report:
    """Per topic: records and bytes per hour, the ``top`` keys by records, the produce-to-
    archive lag (p50/p99/max), over the archive up to the watermark; with ``png``, a chart of
    records per topic per hour written there (a local file of the driver)."""
    started = time.perf_counter()
    target = jdbc_target(dsn)
    with _session(master, spark, "kafkaesque report") as session:
        from pyspark import StorageLevel
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        cut = archive_cut(session, target, 0)
        result = Report(cut.watermark, [], [], [], [])
        if not cut.empty:
            df = read_cut(session, target, cut, table=_REPORT_TABLE, partitions=partitions)
            df = df.select("topic", "timestamp", "archived_at", "key", "size")
            df = df.persist(StorageLevel.MEMORY_AND_DISK)
            try:
                with _spark_errors(target):
                    _fill_report(result, df, F, Window, top)
            finally:
                df.unpersist()
        if png:
            write_chart(result, png)
            result.png = png
        result.seconds = time.perf_counter() - started
        return result


def _fill_report(result: Report, df: DataFrame, F: Any, Window: Any, top: int) -> None:
    totals = df.groupBy("topic").agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("b"))
    result.topics = [TopicTotal(r.topic, r.n, r.b) for r in totals.orderBy("topic").collect()]

    hourly = (
        df.where(F.col("timestamp").isNotNull())
        .groupBy("topic", F.unix_micros(F.date_trunc("hour", "timestamp")).alias("hour"))
        .agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("b"))
        .orderBy("topic", "hour")
    )
    result.hourly = [HourlyRow(r.topic, _utc(r.hour), r.n, r.b) for r in hourly.collect()]

    rank = Window.partitionBy("topic").orderBy(F.desc("n"), F.asc("key"))
    keys = (
        df.where(F.col("key").isNotNull())
        .groupBy("topic", "key")
        .agg(F.count(F.lit(1)).alias("n"))
        .withColumn("rank", F.row_number().over(rank))
        .where(F.col("rank") <= top)
        .orderBy("topic", "rank")
    )
    result.top_keys = [TopKey(r.topic, r["rank"], bytes(r.key), r.n) for r in keys.collect()]

    lag_us = F.unix_micros("archived_at") - F.unix_micros("timestamp")
    lags = (
        df.where(F.col("timestamp").isNotNull())
        .select("topic", lag_us.alias("lag"))
        .groupBy("topic")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.percentile_approx("lag", [0.5, 0.99], 100_000).alias("p"),
            F.max("lag").alias("max"),
        )
        .orderBy("topic")
    )
    result.lag = [
        TopicLag(r.topic, r.n, r.p[0] / 1e6, r.p[1] / 1e6, r["max"] / 1e6) for r in lags.collect()
    ]


def write_chart(result: Report, png: str, max_topics: int = 10) -> None:
    """Records per topic per hour as a line chart (the busiest ``max_topics`` topics, the rest
    summed as "other")."""
    try:
        import matplotlib
    except ImportError:
        raise SparkJobError(
            "matplotlib is needed for --png: pip install 'kafkaesque[spark]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    per_topic: dict[str, dict[datetime.datetime, int]] = {}
    for h in result.hourly:
        per_topic.setdefault(h.topic, {})[h.hour] = h.records
    busiest = sorted(per_topic, key=lambda t: -sum(per_topic[t].values()))
    if len(busiest) > max_topics:
        other: dict[datetime.datetime, int] = {}
        for topic in busiest[max_topics:]:
            for hour, n in per_topic.pop(topic).items():
                other[hour] = other.get(hour, 0) + n
        busiest = [*busiest[:max_topics], "(other)"]
        per_topic["(other)"] = other
    hours = sorted({h.hour for h in result.hourly})
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    try:
        for topic in busiest:
            series = per_topic[topic]
            ax.plot(hours, [series.get(h, 0) for h in hours], marker="o", markersize=3, label=topic)
        ax.set_title(f"Records per topic per hour (archive up to id {result.watermark:,})")
        ax.set_xlabel("hour (UTC)")
        ax.set_ylabel("records")
        ax.grid(True, alpha=0.3)
        if hours:
            ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d %H:00"))
            fig.autofmt_xdate()
            ax.legend(loc="upper left", fontsize="small")
        else:
            ax.text(0.5, 0.5, "no records", ha="center", va="center", transform=ax.transAxes)
        fig.tight_layout()
        try:
            fig.savefig(png, format="png")
        except OSError as exc:
            raise SparkJobError(f"cannot write {png}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


# --- command line (spark-submit scripts/spark_job.py ...) --------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``export --pg-dsn DSN --out DIR [--master URL]`` and
    ``report --pg-dsn DSN [--png FILE] [--master URL]``; errors are one line on stderr."""
    parser = argparse.ArgumentParser(prog="spark_job.py", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("export", "export new records as Parquet"), ("report", "print a report")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument(
            "--pg-dsn",
            default=os.environ.get("KAFKAESQUE_PG_DSN"),
            required="KAFKAESQUE_PG_DSN" not in os.environ,
            help="the archive: postgresql://user:password@host:port/db (env KAFKAESQUE_PG_DSN)",
        )
        sub.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
        if name == "export":
            sub.add_argument("--out", required=True, help="output directory (any Spark URI)")
        else:
            sub.add_argument("--png", help="also write a chart of records per topic per hour")
    args = parser.parse_args(argv)
    try:
        if args.command == "export":
            print(export(args.pg_dsn, args.out, args.master).format())
        else:
            print(report(args.pg_dsn, args.png, args.master).format())
    except SparkJobError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
