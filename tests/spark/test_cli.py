"""`kafkaesque spark export|report` and scripts/spark_job.py: what users type, what they see."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from PIL import Image

from kafkaesque.cli import main
from storage_pg import spark as job
from tests.servers import free_port
from tests.spark.conftest import Archive

ROOT = Path(__file__).resolve().parents[2]


def invoke(home: Path, *args: str) -> Result:
    """The CLI in this process (so the tests' Spark session is the active one it uses), with
    a private data directory and no archive from the environment."""
    env = {name: None for name in os.environ if name.startswith("KAFKAESQUE_")}
    env.pop(job.JAR_ENV, None)  # keep the jar the tests found
    return CliRunner().invoke(main, ["--home", str(home), *args], env=env)


def test_export_then_rerun(spark: Any, archive: Archive, tmp_path: Path) -> None:
    archive.add(30, watermark=30)
    out = tmp_path / "out"
    argv = ["spark", "export", "--pg-dsn", archive.dsn, "--out", str(out), "--master", "local[2]"]
    first = invoke(tmp_path, *argv)
    assert first.exit_code == 0, first.stderr
    assert first.stdout == ""
    assert first.stderr.startswith("exported 30 records (ids 1..30) in ")
    assert job.read_export(spark, str(out)).count() == 30

    archive.add(5, watermark=35)
    # the global --pg-dsn is the default archive, as for every other command
    second = invoke(tmp_path, "--pg-dsn", archive.dsn, "spark", "export", "--out", str(out))
    assert second.exit_code == 0, second.stderr
    assert second.stderr.startswith("exported 5 records (ids 31..35) in ")
    again = invoke(tmp_path, *argv)
    assert again.stderr.startswith("nothing new to export (archive watermark 35)")
    assert job.read_export(spark, str(out)).count() == 35
    assert not spark.sparkContext._jsc.sc().isStopped()  # the active session was reused


def test_report_prints_tables_and_draws_the_chart(
    spark: Any, archive: Archive, tmp_path: Path
) -> None:
    archive.add(200, watermark=200)
    png = tmp_path / "hourly.png"
    argv = ["spark", "report", "--pg-dsn", archive.dsn, "--png", str(png), "--top", "2"]
    result = invoke(tmp_path, *argv)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("archive up to id 200 (the watermark): 200 records")
    for title in ("Per topic", "Top keys per topic", "Produce-to-archive lag per topic (seconds)"):
        assert title in lines
    top = lines.index("Top keys per topic")
    ranks = [line.split()[1] for line in lines[top + 2 : top + 8]]
    assert ranks == ["1", "2"] * 3  # --top 2: two keys for each of the three topics
    assert lines[-1] == f"chart: {png}"
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (1000, 500)


def test_errors_are_one_line(spark: Any, archive: Archive, tmp_path: Path) -> None:
    unreachable = f"postgresql://u@127.0.0.1:{free_port()}/db"
    result = invoke(tmp_path, "spark", "report", "--pg-dsn", unreachable)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("Error: cannot reach the archive at 127.0.0.1:")
    assert result.stderr.count("\n") == 1

    bad = invoke(tmp_path, "spark", "export", "--pg-dsn", "mysql://x/y", "--out", "o")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1
    assert "expected postgresql://user:password@host:port/db" in bad.stderr

    # no DSN and no embedded archive set up before: nothing is started to report on
    none = invoke(tmp_path / "fresh", "spark", "report")
    assert none.exit_code == 1
    assert none.stderr.startswith("Error: no archive: give --pg-dsn")
    assert not (tmp_path / "fresh").exists()

    usage = invoke(tmp_path, "spark", "export", "--pg-dsn", archive.dsn)
    assert usage.exit_code == 2 and "Missing option '--out'" in usage.stderr
    usage = invoke(tmp_path, "spark", "report", "--pg-dsn", archive.dsn, "--top", "0")
    assert usage.exit_code == 2 and "--top" in usage.stderr


def test_spark_job_script_takes_the_same_arguments(tmp_path: Path) -> None:
    env = {**os.environ, job.JAR_ENV: str(tmp_path / "nope.jar")}
    script = (sys.executable, str(ROOT / "scripts" / "spark_job.py"))
    dsn = "postgresql://u@127.0.0.1:1/db"
    result = subprocess.run(
        [*script, "export", "--pg-dsn", dsn, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == f"Error: {job.JAR_ENV}={tmp_path / 'nope.jar'}: no such file\n"
    usage = subprocess.run([*script, "--help"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0
    assert usage.stdout.startswith("Usage: spark_job.py [OPTIONS] COMMAND")
    assert "export" in usage.stdout and "report" in usage.stdout


@pytest.mark.parametrize("command", ["export", "report"])
def test_help_names_the_options(command: str, tmp_path: Path) -> None:
    result = invoke(tmp_path, "spark", command, "--help")
    assert result.exit_code == 0
    for option in ("--pg-dsn", "--master", "--partitions"):
        assert option in result.stdout
