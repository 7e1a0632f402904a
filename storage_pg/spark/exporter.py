"""The incremental Parquet export of the archive.

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

import datetime
import json
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from storage_pg.spark.cut import Gap, Lost, archive_cut, gaps_in_cut, lost_in_cut, read_cut
from storage_pg.spark.errors import SparkJobError
from storage_pg.spark.jdbc import jdbc_target, spark_errors
from storage_pg.spark.session import session_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

STATE_DIR = "_kafkaesque_export"


@dataclass(frozen=True)
class ExportSummary:
    rows: int
    from_id: int  # the run covered from_id <= id <= to_id (empty when to_id < from_id)
    to_id: int
    seconds: float
    gaps: list[Gap] = field(default_factory=list)  # dropped ranges whose ids meet the run's
    lost: list[Lost] = field(default_factory=list)  # ids lost with Redis that meet it

    def format(self) -> str:
        if self.to_id < self.from_id:
            return f"nothing new to export (archive watermark {self.to_id:,})"
        lines = [
            f"exported {self.rows:,} records (ids {self.from_id:,}..{self.to_id:,}) "
            f"in {self.seconds:.1f}s"
        ]
        lines += [
            f"gap: {gap.format()} dropped by retention before archiving: not exported"
            for gap in self.gaps
        ]
        lines += [
            f"lost: {lost.format()} were above the watermark when Redis lost its data: "
            "those not archived were lost, not exported"
            for lost in self.lost
        ]
        return "\n".join(lines)


class _Fs:
    """The few Hadoop FileSystem calls the export's bookkeeping needs (so it works on any
    URI Spark can write, not only the driver's local disk)."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        jvm = spark._jvm
        assert jvm is not None  # as pyspark asserts once a session is made
        self.jvm = jvm
        conf = spark._jsc.hadoopConfiguration()
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
    with session_for(master, spark, "kafkaesque export") as session:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        with spark_errors(target):
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
            with spark_errors(target):
                writer.partitionBy("topic", "date").parquet(staging)
            rows = int(observation.get["rows"])
        gaps = gaps_in_cut(session, target, cut)
        lost = lost_in_cut(session, target, cut)
        state.commit(from_id, to_id, rows)
        state.publish(from_id, to_id)
        state.recover()  # prunes the older commit records
        return ExportSummary(rows, from_id, to_id, time.perf_counter() - started, gaps, lost)


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
