"""The console's browser tests: one store per module (the session's redis-server, flushed,
and a fresh PostgreSQL database, filled with tests/console/data.py), a broker serving an
admin console beside it (``serve --console --console-admin``), a read-only console
(``kafkaesque console``), and one headless chromium per module, driven by chromedriver.
``shot`` saves a screenshot into the module's tmp dir and /tmp/console-shots/."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.console.data import fill
from tests.pg import PostgresServer
from tests.servers import START_TIMEOUT, RedisServer, free_port, wait_for_port
from tests.storage.common import bare_env
from tests.wire.conftest import REPO, Broker

SHOTS = Path("/tmp/console-shots")
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@dataclass(frozen=True)
class Store:
    redis_url: str
    dsn: str


@pytest.fixture(scope="module")
def store(redis_server: RedisServer, pg_server: PostgresServer) -> Iterator[Store]:
    redis.Redis.from_url(redis_server.url).flushall()
    with pg_server.database() as dsn:
        asyncio.run(fill(redis_server.url, dsn))
        yield Store(redis_server.url, dsn)


@dataclass(frozen=True)
class Consoles:
    admin: str  # the broker's console (serve --console --console-admin)
    read_only: str  # kafkaesque console
    broker: Broker


@pytest.fixture(scope="module")
def consoles(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Consoles]:
    admin_port, read_port = free_port(), free_port()
    directory = tmp_path_factory.mktemp("console")
    broker = Broker(
        store.redis_url,
        directory / "broker",
        ["--console", f"127.0.0.1:{admin_port}", "--console-admin"],
        pg_dsn=store.dsn,
    )
    command = [sys.executable, "-m", "kafkaesque", "--redis-url", store.redis_url]
    command += ["--pg-dsn", store.dsn, "console", "--listen", f"127.0.0.1:{read_port}"]
    command += ["--spark-export", str(spark_export(directory / "export"))]
    command += ["--sample-interval", "1"]  # sparklines drawn within the module's run
    stderr = directory / "console.stderr"
    with stderr.open("wb") as err:
        console = subprocess.Popen(
            command, cwd=REPO, env=bare_env(directory), stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        wait_for_port(admin_port, broker.proc, timeout=START_TIMEOUT)
        wait_for_port(read_port, console, timeout=START_TIMEOUT)
        yield Consoles(f"http://127.0.0.1:{admin_port}", f"http://127.0.0.1:{read_port}", broker)
    finally:
        console.terminate()
        console.wait(20)
        broker.stop()
    for text in (broker.stderr(), stderr.read_text()):
        assert "Traceback" not in text, text


def spark_export(out: Path) -> Path:
    """An export's output directory after one run over ids 1..50, with the commit record
    its run writes (storage_pg/spark/exporter.py ``ExportState.commit``)."""
    state = out / "_kafkaesque_export"
    state.mkdir(parents=True)
    record = {"from_id": 1, "to_id": 50, "rows": 50, "committed_at": "2026-01-01T00:00:00+00:00"}
    (state / f"commit-{50:020d}.json").write_text(json.dumps(record))
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1366,900")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shot(
    browser: webdriver.Chrome, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Path]:
    """Save what the browser shows, the whole page tall, as NAME.png."""
    directory = tmp_path_factory.mktemp("shots")
    SHOTS.mkdir(exist_ok=True)

    def save(name: str) -> Path:
        # the whole page, not the window: a viewport as tall as the page, for one shot
        height = browser.execute_script("return document.documentElement.scrollHeight")
        metrics = {"width": 1366, "height": min(int(height), 6000)}
        browser.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {**metrics, "deviceScaleFactor": 1, "mobile": False},
        )
        try:
            data = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})["data"]
        finally:
            browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        target = directory / f"{name}.png"
        target.write_bytes(base64.b64decode(data))
        shutil.copy(target, SHOTS / target.name)
        return target

    return save
