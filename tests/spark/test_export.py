"""The Parquet export: counts and rows equal the archive's up to the watermark, increments,
reruns and crashes neither skip nor duplicate."""

from __future__ import annotations

import datetime
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from storage_pg import spark as job
from storage_pg.spark import exporter
from tests.spark.conftest import Archive


def exported(spark: Any, out: Path) -> list[tuple[Any, ...]]:
    """The dataset's rows: (id, topic, partition, offset, timestamp in µs, key, value, headers,
    producer id/epoch/sequence, archived_at in µs, date), ordered by id."""
    df = job.read_export(spark, str(out))
    df = df.selectExpr(
        "id",
        "topic",
        "partition",
        "offset",
        "unix_micros(timestamp)",
        "key",
        "value",
        "headers",
        "producer_id",
        "producer_epoch",
        "producer_sequence",
        "unix_micros(archived_at)",
        "date",
    )
    return [
        tuple(bytes(v) if isinstance(v, bytearray) else v for v in row)
        for row in df.orderBy("id").collect()
    ]


def micros(value: datetime.datetime | None) -> int | None:
    if value is None:
        return None
    return (value - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(
        microseconds=1
    )


def archived(archive: Archive, up_to: int) -> list[tuple[Any, ...]]:
    """The archive's rows with id <= up_to, shaped as exported() returns them."""
    rows = archive.sql(
        """SELECT id, topic, partition, "offset", "timestamp", key, value, headers::text,
                  producer_id, producer_epoch, producer_sequence, archived_at,
                  ("timestamp" AT TIME ZONE 'UTC')::date AS date
           FROM record WHERE id <= $1 ORDER BY id""",
        up_to,
    )
    return [
        (*r[:4], micros(r[4]), r[5], r[6], r[7], r[8], r[9], r[10], micros(r[11]), r[12])
        for r in rows
    ]


def parquet_files(out: Path) -> list[Path]:
    return [p for p in out.rglob("*.parquet") if "_kafkaesque_export" not in p.parts]


def test_counts_per_topic_and_partition_equal_sql_up_to_the_watermark(
    spark: Any, archive: Archive, tmp_path: Path
) -> None:
    archive.add(700, watermark=555)  # 556..700 are being archived: not part of the cut
    out = tmp_path / "out"

    summary = job.export(archive.dsn, str(out), spark=spark, partitions=3)

    assert (summary.rows, summary.from_id, summary.to_id) == (555, 1, 555)
    expected = {
        (r["topic"], r["partition"]): r["n"]
        for r in archive.sql(
            "SELECT topic, partition, count(*) AS n FROM record WHERE id <= $1 "
            "GROUP BY topic, partition",
            555,
        )
    }
    df = job.read_export(spark, str(out))
    got = {
        (r.topic, r.partition): r["count"]
        for r in df.groupBy("topic", "partition").count().collect()
    }
    assert got == expected
    assert df.agg({"id": "max"}).collect()[0][0] == 555  # nothing above the watermark
    # Hive-style layout: topic, then the UTC date of the record timestamp
    dirs = {p.parent.relative_to(out).as_posix() for p in parquet_files(out)}
    assert "topic=alpha/date=2024-03-09" in dirs and "topic=alpha/date=2024-03-10" in dirs
    assert "topic=alpha/date=__HIVE_DEFAULT_PARTITION__" in dirs  # records without timestamp
    assert all(p.name.startswith("ids-1-555-") for p in parquet_files(out))


def test_parquet_read_back_equals_the_archive_rows(
    spark: Any, archive: Archive, tmp_path: Path
) -> None:
    archive.add(400, watermark=400)
    out = tmp_path / "out"

    job.export(archive.dsn, str(out), spark=spark, partitions=4)

    rows = exported(spark, out)
    assert rows == archived(archive, 400)
    keys = {r[5] for r in rows}
    assert None in keys and b"" in keys and bytes([0xFF, 0x00, 17]) in keys  # null != empty
    assert any(r[4] is None and r[12] is None for r in rows)  # no timestamp, no date


def test_incremental_run_exports_only_new_rows_and_a_rerun_nothing(
    spark: Any, archive: Archive, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    first = job.export(archive.dsn, str(out), spark=spark)  # empty archive, watermark 0
    assert (first.rows, first.to_id) == (0, 0)
    assert first.format().startswith("nothing new to export")

    archive.add(300, watermark=250)
    assert job.export(archive.dsn, str(out), spark=spark).rows == 250

    archive.add(200, watermark=480)  # ids 301..500
    summary = job.export(archive.dsn, str(out), spark=spark, partitions=2)
    assert (summary.rows, summary.from_id, summary.to_id) == (230, 251, 480)
    assert summary.format().startswith("exported 230 records (ids 251..480)")
    assert {p.name[:12] for p in parquet_files(out)} == {"ids-1-250-pa", "ids-251-480-"}

    again = job.export(archive.dsn, str(out), spark=spark)
    assert (again.rows, again.from_id, again.to_id) == (0, 481, 480)
    ids = [r[0] for r in exported(spark, out)]
    assert ids == list(range(1, 481))


def test_watermark_past_ids_without_records_moves_on(
    spark: Any, archive: Archive, tmp_path: Path
) -> None:
    archive.add(10, watermark=15)  # 11..15: e.g. rejected batches, no record rows
    out = tmp_path / "out"
    assert job.export(archive.dsn, str(out), spark=spark).to_id == 15
    archive.sql("DELETE FROM record WHERE id > 0")
    archive.set_watermark(20)
    summary = job.export(archive.dsn, str(out), spark=spark)
    assert (summary.rows, summary.from_id, summary.to_id) == (0, 16, 20)
    assert len(exported(spark, out)) == 10


def test_crash_between_parquet_write_and_state_update(
    spark: Any, archive: Archive, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive.add(300, watermark=200)
    out = tmp_path / "out"
    job.export(archive.dsn, str(out), spark=spark)
    archive.set_watermark(300)

    def crash(*args: Any) -> None:
        raise RuntimeError("killed")

    with monkeypatch.context() as m:
        m.setattr(job.ExportState, "commit", crash)
        with pytest.raises(RuntimeError, match="killed"):
            job.export(archive.dsn, str(out), spark=spark)
    assert (out / "_kafkaesque_export" / "staging" / "201-300").is_dir()  # written, not committed
    assert len(exported(spark, out)) == 200  # readers never saw it

    summary = job.export(archive.dsn, str(out), spark=spark)
    assert (summary.rows, summary.from_id, summary.to_id) == (100, 201, 300)
    assert [r[0] for r in exported(spark, out)] == list(range(1, 301))
    assert not any((out / "_kafkaesque_export" / "staging").iterdir())


def test_crash_while_moving_committed_files_into_place(
    spark: Any, archive: Archive, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive.add(300, watermark=300)
    out = tmp_path / "out"
    real_move = exporter._move
    moves = []

    def move_one_then_crash(fs: Any, src: Any, dst: Any) -> None:
        if moves:
            raise RuntimeError("killed")
        moves.append(dst)
        real_move(fs, src, dst)

    with monkeypatch.context() as m:
        m.setattr(exporter, "_move", move_one_then_crash)
        with pytest.raises(RuntimeError, match="killed"):
            job.export(archive.dsn, str(out), spark=spark, partitions=2)
    assert len(parquet_files(out)) == 1  # committed, one file published

    summary = job.export(archive.dsn, str(out), spark=spark)  # recovery finishes the moves
    assert summary.rows == 0 and summary.to_id == 300
    assert exported(spark, out) == archived(archive, 300)
    state = sorted(p.name for p in (out / "_kafkaesque_export").iterdir() if p.name[0] != ".")
    assert state == ["commit-00000000000000000300.json", "staging"]


def test_a_watermark_below_the_last_export_is_refused(
    spark: Any, archive: Archive, tmp_path: Path
) -> None:
    archive.add(50, watermark=50)
    out = tmp_path / "out"
    job.export(archive.dsn, str(out), spark=spark)
    archive.set_watermark(40)
    with pytest.raises(job.SparkJobError, match="below the last exported id"):
        job.export(archive.dsn, str(out), spark=spark)


def test_default_partitioning_and_the_jdbc_bounds(spark: Any, archive: Archive) -> None:
    archive.add(120, watermark=100)
    target = job.jdbc_target(archive.dsn)
    cut = job.archive_cut(spark, target, after=30)
    assert cut == job.Cut(after=30, watermark=100, first=31, last=100)
    df = job.read_cut(spark, target, cut, partitions=3)
    assert df.rdd.getNumPartitions() == 3
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "GreaterThan(id,30)" in plan and "LessThanOrEqual(id,100)" in plan
    assert Counter(len(p) for p in df.rdd.glom().collect()) == Counter({23: 2, 24: 1})
    assert job.jdbc_partitions(spark, cut) == 1  # 70 ids: too few to split
    big = job.Cut(0, 10**7, 1, 10**7)
    assert job.jdbc_partitions(spark, big) == 5  # > 2 cores: at most 2M ids per partition


def test_a_run_reports_the_dropped_ranges_it_spans(
    spark: Any, archive: Archive, tmp_path: Path
) -> None:
    archive.add(10, watermark=30)  # ids 11..30: dropped by retention before archiving
    archive.sql(
        "INSERT INTO dropped_range (topic, partition, first_offset, last_offset, first_id,"
        " last_id) VALUES ('t', 1, 5, 24, 11, 30), ('u', 0, 0, 9, 41, 50)"
    )
    out = tmp_path / "out"
    summary = job.export(archive.dsn, str(out), spark=spark)
    assert (summary.rows, summary.to_id) == (10, 30)
    assert [(g.topic, g.partition, g.first_offset, g.last_offset) for g in summary.gaps] == [
        ("t", 1, 5, 24)
    ]
    assert summary.format().splitlines()[1] == (
        "gap: t[1] offsets 5..24 (ids within 11..30) dropped by retention before archiving:"
        " not exported"
    )
    archive.set_watermark(60)
    later = job.export(archive.dsn, str(out), spark=spark)
    assert [(g.topic, g.first_id, g.last_id) for g in later.gaps] == [("u", 41, 50)]


def test_a_run_reports_the_ids_lost_with_redis_it_spans(
    spark: Any, archive: Archive, tmp_path: Path
) -> None:
    archive.add(10, watermark=25)  # ids 11..25: above the watermark when Redis lost its data
    archive.sql("INSERT INTO lost_range (first_id, last_id) VALUES (11, 25), (90, 95)")
    summary = job.export(archive.dsn, str(tmp_path / "out"), spark=spark)
    assert [(x.first_id, x.last_id) for x in summary.lost] == [(11, 25)]
    assert summary.format().splitlines()[1] == (
        "lost: ids 11..25 were above the watermark when Redis lost its data: those not"
        " archived were lost, not exported"
    )
