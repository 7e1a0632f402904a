"""The report: per topic per hour, top keys and lag equal SQL computed over the same cut."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from storage_pg import spark as job
from storage_pg.spark.reporter import _show_key as show_key
from tests.spark.conftest import Archive

UTC = datetime.UTC


def test_report_values_equal_sql(spark: Any, archive: Archive) -> None:
    archive.add(600, watermark=520)  # rows 521..600 must not count
    up_to = 520

    report = job.report(archive.dsn, spark=spark, partitions=3, top=4)

    assert report.watermark == up_to
    totals = archive.sql(
        """SELECT topic, count(*) AS n,
                  sum(coalesce(octet_length(key), 0) + coalesce(octet_length(value), 0)) AS b
           FROM record WHERE id <= $1 GROUP BY topic ORDER BY topic""",
        up_to,
    )
    assert [(t.topic, t.records, t.bytes) for t in report.topics] == [tuple(r) for r in totals]

    hourly = archive.sql(
        """SELECT topic, date_trunc('hour', "timestamp" AT TIME ZONE 'UTC') AS hour,
                  count(*) AS n,
                  sum(coalesce(octet_length(key), 0) + coalesce(octet_length(value), 0)) AS b
           FROM record WHERE id <= $1 AND "timestamp" IS NOT NULL
           GROUP BY 1, 2 ORDER BY 1, 2""",
        up_to,
    )
    assert [(h.topic, h.hour, h.records, h.bytes) for h in report.hourly] == [
        (r["topic"], r["hour"].replace(tzinfo=UTC), r["n"], r["b"]) for r in hourly
    ]
    assert len({h.hour.date() for h in report.hourly}) == 2  # crosses midnight UTC

    top = archive.sql(
        """SELECT topic, rank, key, n FROM (
               SELECT topic, key, count(*) AS n,
                      row_number() OVER (PARTITION BY topic ORDER BY count(*) DESC, key) AS rank
               FROM record WHERE id <= $1 AND key IS NOT NULL GROUP BY topic, key) AS s
           WHERE rank <= 4 ORDER BY topic, rank""",
        up_to,
    )
    assert [(k.topic, k.rank, k.key, k.records) for k in report.top_keys] == [tuple(r) for r in top]

    lag = archive.sql(
        """SELECT topic, count(*) AS n,
                  percentile_disc(0.5) WITHIN GROUP (ORDER BY lag) AS p50,
                  percentile_disc(0.99) WITHIN GROUP (ORDER BY lag) AS p99,
                  max(lag) AS max
           FROM (SELECT topic,
                        (extract(epoch FROM archived_at - "timestamp") * 1000000)::bigint AS lag
                 FROM record WHERE id <= $1 AND "timestamp" IS NOT NULL) AS s
           GROUP BY topic ORDER BY topic""",
        up_to,
    )
    assert [(x.topic, x.records, x.p50, x.p99, x.max) for x in report.lag] == [
        (r["topic"], r["n"], r["p50"] / 1e6, r["p99"] / 1e6, r["max"] / 1e6) for r in lag
    ]

    text = report.format()
    assert text.startswith("archive up to id 520 (the watermark): 520 records, ")
    for title in ("Per topic", "per topic per hour (UTC)", "Top keys", "lag per topic"):
        assert title in text
    first = report.hourly[0]
    assert f"{first.topic}  {first.hour:%Y-%m-%d %H}:00" in text


def test_report_png_is_written_and_valid(spark: Any, archive: Archive, tmp_path: Path) -> None:
    archive.add(200, topics=[f"topic-{n}" for n in range(13)])  # > 10 topics: "(other)"
    archive.set_watermark(200)
    png = tmp_path / "chart.png"

    report = job.report(archive.dsn, png=str(png), spark=spark)

    assert report.png == str(png)
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    with Image.open(png) as image:
        image.verify()
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (1000, 500)
    assert report.format().endswith(f"chart: {png}")


def test_report_of_an_empty_archive(spark: Any, archive: Archive, tmp_path: Path) -> None:
    archive.add(5)  # above the watermark (0): not archived yet
    png = tmp_path / "empty.png"
    report = job.report(archive.dsn, png=str(png), spark=spark)
    assert (report.watermark, report.topics, report.hourly, report.lag) == (0, [], [], [])
    assert report.format() == (
        "archive up to id 0 (the watermark): 0 records, 0 B of keys and values in 0 topics"
    )
    assert png.read_bytes().startswith(b"\x89PNG")


def test_key_display() -> None:
    assert show_key(b"user-1") == "user-1"
    assert show_key(b"\xff\x00") == "0xff00"
    assert show_key(b"") == ""
    assert show_key(b"x" * 100) == "x" * 39 + "…"


@pytest.mark.parametrize(
    ("span", "unit"),
    [(datetime.timedelta(minutes=10), "minute"), (datetime.timedelta(days=3), "hour")],
)
def test_report_chart_fits_the_data(
    spark: Any, archive: Archive, tmp_path: Path, span: datetime.timedelta, unit: str
) -> None:
    """The chart's buckets and time axis follow the data's span (ten minutes was one dot per
    topic on an axis from 2025 to 2029), and a small topic shows beside a large one."""
    # Row i is stamped BASE + i * step: ids 1-600 span ``span``.
    archive.add(590, topics=["large"], step=span / 600)
    archive.add(10, topics=["small"], step=span / 600)
    archive.set_watermark(600)
    png = tmp_path / f"chart-{unit}.png"

    report = job.report(archive.dsn, png=str(png), spark=spark)

    assert report.chart_unit == unit
    large = [p for p in report.chart if p.topic == "large"]
    small = [p for p in report.chart if p.topic == "small"]
    assert len(large) >= 10 and small  # a line, not a dot
    first, last = min(p.at for p in report.chart), max(p.at for p in report.chart)
    assert last - first <= span + datetime.timedelta(hours=1)
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (1000, 500)


def test_chart_units_by_span() -> None:
    assert job.chart_unit(datetime.timedelta(0)) == "minute"
    assert job.chart_unit(datetime.timedelta(hours=3)) == "minute"
    assert job.chart_unit(datetime.timedelta(hours=4)) == "hour"
    assert job.chart_unit(datetime.timedelta(days=7)) == "hour"
    assert job.chart_unit(datetime.timedelta(days=90)) == "day"
