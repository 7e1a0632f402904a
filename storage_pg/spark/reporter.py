"""The report over the archive: records and bytes per topic per hour, top keys and the
produce-to-archive lag, as text tables and a PNG chart."""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from kafkaesque.tables import format_table
from storage_pg.spark.cut import archive_cut, read_cut
from storage_pg.spark.errors import SparkJobError
from storage_pg.spark.jdbc import jdbc_target, spark_errors
from storage_pg.spark.session import session_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TOP_KEYS = 10


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
class ChartPoint:
    topic: str
    at: datetime.datetime  # UTC, start of the bucket (Report.chart_unit)
    records: int


# The chart's bucket for data spanning up to so long: a few dozen points per line, so
# ten minutes of data is not one dot in an hour, nor three years a line of 26,000 hours.
CHART_UNITS = (
    (datetime.timedelta(hours=3), "minute"),
    (datetime.timedelta(days=7), "hour"),
)
CHART_FORMATS = {"minute": "%H:%M", "hour": "%m-%d %H:00", "day": "%Y-%m-%d"}


def chart_unit(span: datetime.timedelta) -> str:
    """The bucket (a date_trunc unit) for a chart over data spanning ``span``."""
    return next((unit for limit, unit in CHART_UNITS if span <= limit), "day")


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
    # Records per topic per chart_unit (minute, hour or day, from the data's span).
    chart: list[ChartPoint] = field(default_factory=list)
    chart_unit: str = "hour"

    def format(self) -> str:
        """The report as aligned text tables."""
        records = sum(t.records for t in self.topics)
        size = sum(t.bytes for t in self.topics)
        out = [
            f"archive up to id {self.watermark:,} (the watermark): {records:,} records, "
            f"{_human_bytes(size)} of keys and values in {len(self.topics)} "
            + ("topic" if len(self.topics) == 1 else "topics"),
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
    return format_table(header, rows, indent="  ") if rows else ["  (none)"]


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
    with session_for(master, spark, "kafkaesque report") as session:
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
                with spark_errors(target):
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
    stamped = df.where(F.col("timestamp").isNotNull())
    span = stamped.agg(F.min("timestamp").alias("first"), F.max("timestamp").alias("last"))
    first, last = span.collect()[0]
    if first is not None:
        result.chart_unit = chart_unit(last - first)
        points = (
            stamped.groupBy("topic", F.unix_micros(F.date_trunc(result.chart_unit, "timestamp")))
            .agg(F.count(F.lit(1)).alias("n"))
            .toDF("topic", "at", "n")
            .orderBy("topic", "at")
        )
        result.chart = [ChartPoint(r.topic, _utc(r.at), r.n) for r in points.collect()]

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
    """Records per topic over time as a line chart (the busiest ``max_topics`` topics, the
    rest summed as "other"): one point per minute, hour or day as the data's span asks
    (``Report.chart_unit``), the time axis over the data alone, and a log scale where
    counts differ by more than 50 times, so a topic of ten records shows beside one of a
    million."""
    try:
        import matplotlib
    except ImportError:
        raise SparkJobError(
            "matplotlib is needed for --png: pip install 'kafkaesque[spark]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    per_topic: dict[str, dict[datetime.datetime, int]] = {}
    for point in result.chart:
        per_topic.setdefault(point.topic, {})[point.at] = point.records
    busiest = sorted(per_topic, key=lambda t: -sum(per_topic[t].values()))
    if len(busiest) > max_topics:
        other: dict[datetime.datetime, int] = {}
        for topic in busiest[max_topics:]:
            for at, n in per_topic.pop(topic).items():
                other[at] = other.get(at, 0) + n
        busiest = [*busiest[:max_topics], "(other)"]
        per_topic["(other)"] = other
    times = sorted({point.at for point in result.chart})
    unit = result.chart_unit
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    try:
        for topic in busiest:
            series = per_topic[topic]
            when = sorted(series)
            ax.plot(
                cast(Any, when),  # datetimes: matplotlib's date units (its stubs: numbers)
                [series[t] for t in when],
                marker="o",
                markersize=3,
                label=topic,
            )
        ax.set_title(f"Records per topic per {unit} (archive up to id {result.watermark:,})")
        ax.set_ylabel(f"records per {unit}")
        ax.grid(True, alpha=0.3)
        if times:
            step = {"minute": 60, "hour": 3600}.get(unit, 86400)
            pad = datetime.timedelta(seconds=step / 2)
            ax.set_xlim(cast(Any, times[0] - pad), cast(Any, times[-1] + pad))
            counts = [point.records for point in result.chart]
            if max(counts) > 50 * min(counts):  # small topics beside large: a log scale
                ax.set_yscale("log")
                # 1, 2 and 5 of each decade: a range within one decade still has labels.
                ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            else:
                ax.set_ylim(bottom=0)
            plain = ticker.FuncFormatter(lambda y, _: f"{y:,.0f}" if y >= 1 else f"{y:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
            ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=3, maxticks=10))
            ax.xaxis.set_major_formatter(mdates.DateFormatter(CHART_FORMATS[unit]))
            day = times[0].strftime("%Y-%m-%d")
            span = day if times[-1].date() == times[0].date() else f"{day} to {times[-1]:%Y-%m-%d}"
            ax.set_xlabel(f"{span} (UTC)")
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
