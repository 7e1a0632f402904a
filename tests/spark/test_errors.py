"""DSN conversion, and the one-line errors: a missing driver jar, an unreachable archive."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from storage_pg import spark as job
from storage_pg.spark import jdbc, session
from tests.servers import free_port
from tests.spark.conftest import Archive


@pytest.mark.parametrize(
    ("dsn", "url", "props"),
    [
        (
            "postgresql://kafkaesque:s3cr%40t@127.0.0.1:5433/archive",
            "jdbc:postgresql://127.0.0.1:5433/archive",
            {"user": "kafkaesque", "password": "s3cr@t"},
        ),
        (
            "postgres://bob@db.example.com/logs?sslmode=require&application_name=x",
            "jdbc:postgresql://db.example.com:5432/logs",
            {"user": "bob", "sslmode": "require", "ApplicationName": "x"},
        ),
        (
            "postgresql://u:p@[::1]:6000,other:6001/my%20db?connect_timeout=3",
            "jdbc:postgresql://[::1]:6000,other:6001/my%20db",
            {"user": "u", "password": "p", "connectTimeout": "3"},
        ),
        (
            "postgresql://carol@h",  # database defaults to the user name, as in libpq
            "jdbc:postgresql://h:5432/carol",
            {"user": "carol"},
        ),
    ],
)
def test_dsn_to_jdbc(dsn: str, url: str, props: dict[str, str]) -> None:
    target = job.jdbc_target(dsn)
    assert target.url == url
    assert target.properties["driver"] == "org.postgresql.Driver"
    assert props.items() <= target.properties.items()
    assert "password" not in target.url and "s3cr" not in target.url
    if "password" not in props:
        assert "password" not in target.properties or os.environ.get("PGPASSWORD")


@pytest.mark.parametrize(
    "dsn", ["mysql://a@b/c", "host=localhost dbname=x", "postgresql://u@h/db?host=/var/run/pg"]
)
def test_bad_dsns(dsn: str) -> None:
    with pytest.raises(job.SparkJobError) as info:
        job.jdbc_target(dsn)
    assert "\n" not in str(info.value)


def test_missing_driver_jar(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(job.JAR_ENV, str(tmp_path / "nope.jar"))
    with pytest.raises(job.JdbcDriverMissing, match=r"^KAFKAESQUE_JDBC_JAR=.*nope\.jar: no such"):
        job.find_jdbc_jar()
    monkeypatch.delenv(job.JAR_ENV)
    monkeypatch.setattr(jdbc, "KNOWN_JARS", (str(tmp_path / "*.jar"),))
    with pytest.raises(job.JdbcDriverMissing) as info:
        job.find_jdbc_jar()
    assert str(info.value) == (
        "the PostgreSQL JDBC driver is missing: install it (Debian: apt-get install "
        "libpostgresql-jdbc-java) or set KAFKAESQUE_JDBC_JAR to the jar's path"
    )
    (tmp_path / "postgresql-42.7.1.jar").write_bytes(b"")
    assert job.find_jdbc_jar() == str(tmp_path / "postgresql-42.7.1.jar")


def test_missing_driver_jar_fails_export_and_report_before_spark_starts(
    spark: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(job.JAR_ENV, str(tmp_path / "nope.jar"))
    monkeypatch.setattr(session, "_active_session", lambda: None)  # as in a fresh process
    dsn = "postgresql://u@127.0.0.1:1/db"
    with pytest.raises(job.JdbcDriverMissing):
        job.export(dsn, str(tmp_path / "out"))
    with pytest.raises(job.JdbcDriverMissing):
        job.report(dsn)
    assert not spark.sparkContext._jsc.sc().isStopped()  # nothing started, nothing stopped


@pytest.mark.parametrize("run", ["export", "report"])
def test_unreachable_archive(spark: Any, run: str, tmp_path: Path) -> None:
    port = free_port()
    dsn = f"postgresql://kafkaesque:pw@127.0.0.1:{port}/archive"
    with pytest.raises(job.ArchiveUnreachable) as info:
        if run == "export":
            job.export(dsn, str(tmp_path / "out"), spark=spark)
        else:
            job.report(dsn, spark=spark)
    message = str(info.value)
    assert message.startswith(f"cannot reach the archive at 127.0.0.1:{port}/archive: ")
    assert "refused" in message and "\n" not in message


def test_missing_database_and_missing_schema(spark: Any, archive: Archive, tmp_path: Path) -> None:
    no_db = archive.dsn.rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(job.ArchiveUnreachable, match='database "no_such_db" does not exist'):
        job.export(no_db, str(tmp_path / "out"), spark=spark)
    no_schema = archive.dsn.rsplit("/", 1)[0] + "/postgres"
    with pytest.raises(job.SparkJobError, match="run the archiver first") as info:
        job.report(no_schema, spark=spark)
    assert "\n" not in str(info.value)
