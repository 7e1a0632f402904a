"""The Spark session the jobs run in: the active one (spark-submit's, a test's) or a new
one with the JDBC driver on its class path, UTC as its time zone and a quiet console."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from storage_pg.spark.errors import JdbcDriverMissing, SparkJobError
from storage_pg.spark.jdbc import JDBC_DRIVER, find_jdbc_jar, first_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
    # Python workers (the data source's tasks) run this interpreter, whose environment
    # has pyarrow and this project, not whatever "python3" is first on the PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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
        raise SparkJobError(f"cannot start Spark on {master}: {first_line(exc)}") from None
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
    jvm = spark._jvm
    assert jvm is not None  # as pyspark asserts once a session is made
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
        # (pyspark's SparkContext has no addJar: the JVM context's)
        spark.sparkContext._jsc.addJar(jar)


@contextlib.contextmanager
def session_for(master: str, spark: SparkSession | None, app_name: str) -> Iterator[SparkSession]:
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
