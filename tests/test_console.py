"""The web console's handlers through aiohttp's test client on a real redis-server (no
browser, no archive: tests/console/ has those): every page answers, records decode as
JSON, text or hex, search and export, bad input is a sentence on the page and never a
traceback, read-only mode has no change endpoint, a POST without the CSRF token is
refused, and with SASL users a login is needed and ACLs decide which topics are seen."""

from __future__ import annotations

import asyncio
import csv
import html
import io
import json
import re
from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient, TestServer

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.console.app import build_app, make_console
from kafkaesque.console.context import CONSOLE
from kafkaesque.hot.connect import redis_client
from kafkaesque.hot.log import Log
from kafkaesque.records.build import build_batch
from kafkaesque.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from kafkaesque.security.scram import SCRAM_SHA_256, new_credential

Scenario = Callable[[TestClient, Log], Awaitable[None]]


def run(redis_url: str, scenario: Scenario, admin: bool = False) -> None:
    async def main() -> None:
        log = Log(redis_client(redis_url))
        await log.create_topic(TopicConfig("words", 2))
        values = [b"alpha", b'{"kind": "json", "n": 2}', b"\x00\xfe\xff raw", b"needle here"]
        await log.append("words", 0, [build_batch(values, [b"k0", b"k1", None, b"k3"])])
        await log.append("words", 1, [build_batch([b"other partition"])])
        await log.create_topic(TopicConfig("hidden", 1))
        state = make_console(log, admin, sample_seconds=3600)
        try:
            async with TestClient(TestServer(build_app(state))) as client:
                await scenario(client, log)
        finally:
            await log.stores.close()

    asyncio.run(main())


async def page(client: TestClient, url: str, status: int = 200) -> str:
    answer = await client.get(url)
    text = await answer.text()
    assert answer.status == status, f"{url}: {answer.status}\n{text[:2000]}"
    assert "Traceback" not in text and 'File "' not in text
    return text


def csrf_of(html: str) -> str:
    found = re.search(r'<meta name="csrf" content="([^"]+)">', html)
    assert found is not None
    return found.group(1)


def shown_errors(html: str) -> list[str]:
    return re.findall(r'<div class="message error"[^>]*>([^<]*)<', html)


def test_pages_records_search_and_export(redis_url: str) -> None:
    async def scenario(client: TestClient, log: Log) -> None:
        for url in ("/", "/topics", "/topics/words", "/groups", "/archive", "/security"):
            await page(client, url)
        listing = await page(client, "/topics")
        assert 'href="/topics/words"' in listing and 'href="/topics/hidden"' in listing
        assert "Topics (2)" in listing
        shown = await page(client, "/topics/words/messages")
        assert shown.count('class="tier redis"') == 5  # no archive: every record from Redis
        assert (
            '<span class="fmt">json</span>' in shown
            and "&quot;kind&quot;: &quot;json&quot;" in shown
        )
        assert '<span class="fmt">hex</span>' in shown and "00 fe ff 20 72 61 77" in shown
        assert '<span class="fmt">text</span>' in shown and ">alpha<" in shown
        as_hex = await page(client, "/topics/words/messages?format=hex&partition=0")
        assert "61 6c 70 68 61" in as_hex  # "alpha"
        found = await page(client, "/topics/words/messages?search=NEEDLE")
        assert "1 shown matching" in found and "needle here" in found
        limited = await page(client, "/topics/words/messages?search=zzz&scan=2&partition=0")
        assert "the scan limit, 2, was reached" in limited
        one = await page(client, "/topics/words/messages/0/1")
        assert "&quot;n&quot;: 2" in one and "tier redis" in one
        from_offset = await page(client, "/topics/words/messages?start=offset&offset=2&partition=0")
        assert "needle here" in from_offset and ">alpha<" not in from_offset
        newest = await page(client, "/topics/words/messages?partition=0&limit=2")
        older = re.search(r'<p id="paging"><a href="([^"]+)">', newest)
        assert older is not None and "before=2" in older.group(1)
        back = await page(client, html.unescape(older.group(1)))
        assert re.findall(r">0/(\d)<", back) == ["1", "0"] and 'id="paging"' not in back
        forward = await page(
            client, "/topics/words/messages?partition=0&limit=2&start=offset&offset=0"
        )
        later = re.search(r'<p id="paging"><a href="([^"]+)">', forward)
        assert later is not None and "offset=2" in later.group(1)
        assert re.findall(r">0/(\d)<", await page(client, html.unescape(later.group(1)))) == [
            "2",
            "3",
        ]
        answer = await client.get("/topics/words/export?as=json&partition=0&limit=3")
        exported = json.loads(await answer.text())
        assert [r["offset"] for r in exported] == [3, 2, 1]
        assert exported[1]["value"] == "base64:AP7/IHJhdw=="
        answer = await client.get("/topics/words/export?as=csv&start=offset&offset=0&partition=0")
        rows = list(csv.reader(io.StringIO(await answer.text())))
        assert rows[0][:3] == ["partition", "offset", "tier"] and len(rows) == 5

    run(redis_url, scenario)


def test_bad_input_is_a_sentence_on_the_page(redis_url: str) -> None:
    async def scenario(client: TestClient, log: Log) -> None:
        cases = [
            (
                "/topics/words/messages?start=offset&offset=99&partition=0",
                400,
                "past the end of partition 0",
            ),
            ("/topics/words/messages?start=offset&partition=0", 400, "give an offset"),
            ("/topics/words/messages?start=time&time=yesterday-ish", 400, "time must be ISO 8601"),
            ("/topics/words/messages?partition=7", 400, "partition must be between 0 and 1"),
            ("/topics/words/messages?limit=100000", 400, "limit must be between 1 and 500"),
            ("/topics/words/messages?scan=abc", 400, "scan must be a whole number"),
            ("/topics/words/messages?search=" + "x" * 1001, 400, "longer than 1,000"),
            ("/topics/words/messages?format=yaml", 400, "format must be one of"),
            ("/topics/words/messages/0/99", 400, "past the end of partition 0"),
            ("/topics/words/messages/9/0", 400, "has no partition 9"),
            ("/topics/words/export?as=xml", 400, "export as json or csv"),
            ("/topics/vanished", 404, "no such topic"),
            ("/topics/vanished/messages", 404, "no such topic"),
            ("/groups/nobody", 400, "no group named"),
        ]
        for url, status, text in cases:
            html = await page(client, url, status)
            assert any(text in e for e in shown_errors(html)), (url, shown_errors(html))
        # a time past every record: a note per partition, not an error
        late = await page(client, "/topics/words/messages?start=time&time=2100-01-01T00:00:00Z")
        assert "has no record at or after that time" in late
        # a topic deleted between two requests
        await log.delete_topic("words")
        html = await page(client, "/topics/words/messages", 404)
        assert shown_errors(html)

    run(redis_url, scenario)


def test_read_only_has_no_change_endpoint(redis_url: str) -> None:
    async def scenario(client: TestClient, log: Log) -> None:
        html = await page(client, "/topics/words")
        token = csrf_of(html)
        assert "Delete topic" not in html and "read-only" in html
        for url, data in [
            ("/topics", {"name": "new", "partitions": "1"}),
            ("/topics/words/delete", {}),
            ("/topics/words/config", {"set": "retention.ms=1000"}),
            ("/topics/words/produce", {"value": "x"}),
            ("/groups/g/reset", {"to": "earliest"}),
            ("/security/acls", {"principal": "User:x"}),
        ]:
            answer = await client.post(url, data={**data, "csrf": token})
            assert answer.status in (404, 405), url
        assert sorted(await log.list_topics()) == ["hidden", "words"]
        assert (await log.topic("words")).value("retention.ms") != "1000"
        assert (await log.state("words", 0)).log_end == 4

    run(redis_url, scenario)


def test_admin_changes_need_the_csrf_token(redis_url: str) -> None:
    async def scenario(client: TestClient, log: Log) -> None:
        answer = await client.post("/topics", data={"name": "forged", "partitions": "1"})
        assert answer.status == 403 and "CSRF" in await answer.text()
        answer = await client.post("/topics", data={"name": "forged", "csrf": "guessed"})
        assert answer.status == 403
        assert "forged" not in await log.list_topics()
        token = csrf_of(await page(client, "/topics"))
        answer = await client.post(
            "/topics", data={"name": "made", "partitions": "3", "csrf": token}
        )
        assert answer.status == 200 and "created topic made" in await answer.text()
        assert (await log.topic("made")).partitions == 3
        bad = await client.post("/topics", data={"name": "bad name!", "csrf": token})
        assert bad.status == 400 and shown_errors(await bad.text())
        answer = await client.post(
            "/topics/made/produce",
            data={
                "csrf": token,
                "key": "k",
                "value": '{"hello": 1}',
                "headers": "h=v",
                "partition": "2",
            },
        )
        assert "produced to partition 2 at offset 0" in await answer.text()
        answer = await client.post(
            "/topics/made/config", data={"csrf": token, "set": "retention.ms=60000"}
        )
        assert answer.status == 200
        assert (await log.topic("made")).value("retention.ms") == "60000"
        answer = await client.post("/topics/made/config", data={"csrf": token, "set": "no.such=1"})
        assert answer.status == 400 and shown_errors(await answer.text())
        answer = await client.post("/topics/made/delete", data={"csrf": token})
        assert answer.status == 200
        assert "made" not in await log.list_topics()
        # users and ACLs
        acl = {
            "principal": "User:bob",
            "host": "*",
            "resource_type": "TOPIC",
            "pattern_type": "PREFIXED",
            "name": "wo",
            "operation": "READ",
            "permission": "ALLOW",
        }
        answer = await client.post("/security/acls", data={**acl, "csrf": token})
        assert answer.status == 200 and "added (principal=User:bob" in await answer.text()
        assert len(await log.stores.acls.read()) == 1
        bad = await client.post("/security/acls", data={**acl, "operation": "FLY", "csrf": token})
        assert bad.status == 400 and "operation &#x27;FLY&#x27; is not one of" in await bad.text()
        answer = await client.post("/security/acls/delete", data={**acl, "csrf": token})
        assert "removed 1 ACL(s)" in await answer.text()
        assert await log.stores.acls.read() == []
        bad = await client.post(
            "/security/users", data={"user": "bob", "password": "", "csrf": token}
        )
        assert bad.status == 400 and shown_errors(await bad.text())
        answer = await client.post(
            "/security/users",
            data={"user": "bob", "password": "pw", "mechanism": "SCRAM-SHA-512", "csrf": token},
        )
        assert "user bob has a SCRAM-SHA-512 credential" in await answer.text()
        assert list(await log.stores.credentials.users()) == ["bob"]

    run(redis_url, scenario, admin=True)


def test_login_and_acls_decide_what_a_user_sees(redis_url: str) -> None:
    async def scenario(client: TestClient, log: Log) -> None:
        await log.stores.credentials.put("alice", new_credential(SCRAM_SHA_256, "wonderland"))
        await log.stores.acls.add(
            [
                AclBinding(
                    ResourceType.TOPIC,
                    "words",
                    PatternType.LITERAL,
                    "User:alice",
                    "*",
                    Operation.DESCRIBE,
                    Permission.ALLOW,
                )
            ]
        )
        answer = await client.get("/topics", allow_redirects=False)
        assert answer.status == 303 and answer.headers["Location"].startswith("/login")
        html = await page(client, "/login")
        token = csrf_of(html)
        wrong = await client.post(
            "/login", data={"user": "alice", "password": "nope", "csrf": token}
        )
        assert wrong.status == 401 and "wrong user or password" in await wrong.text()
        assert (await client.get("/topics", allow_redirects=False)).status == 303
        nobody = await client.post(
            "/login", data={"user": "mallory", "password": "x", "csrf": token}
        )
        assert nobody.status == 401
        right = await client.post(
            "/login",
            data={"user": "alice", "password": "wonderland", "csrf": token, "next": "/topics"},
        )
        listing = await right.text()
        assert right.status == 200 and "User:alice" in listing
        assert 'href="/topics/words"' in listing and "/topics/hidden" not in listing
        await page(client, "/topics/hidden", 404)
        await page(client, "/topics/hidden/messages", 404)
        await page(client, "/topics/words/messages")
        security = await page(client, "/security", 403)
        assert "may not DESCRIBE the cluster" in security
        token = csrf_of(listing)
        await client.post("/logout", data={"csrf": token})
        assert (await client.get("/topics", allow_redirects=False)).status == 303

    run(redis_url, scenario)


def test_groups_of_every_type_with_lag(redis_url: str) -> None:
    async def scenario(client: TestClient, log: Log) -> None:
        from kafkaesque.groups.coordinator import GroupCoordinator
        from kafkaesque.groups.share.coordinator import ShareGroupCoordinator
        from kafkaesque.groups.share.state import ShareHeartbeat

        await GroupCoordinator(log).admin.reset_offsets("classic-g", {("words", 0): 1})
        share = ShareGroupCoordinator(log)
        await share.heartbeat("share-g", ShareHeartbeat("m1", 0, topics=["words"], client_id="c1"))
        listing = await page(client, "/groups")
        assert "Groups (2)" in listing
        assert re.search(r">classic-g<.*?<td>classic</td>", listing)
        assert re.search(r">share-g<.*?<td>share</td><td>Stable</td>", listing)
        detail = await page(client, "/groups/classic-g")
        assert '<b id="total-lag">3</b>' in detail  # log end 4, committed 1
        assert "Reset offsets" not in detail  # read-only
        lag = await page(client, "/groups/classic-g/lag")
        assert 'id="lag-table"' in lag and "<html" not in lag
        shared = await page(client, "/groups/share-g")
        assert "c1" in shared and "share" in shared
        share.close()

    run(redis_url, scenario)


def test_the_command_says_where_it_listens_and_why_it_cannot(redis_url: str) -> None:
    import socket
    import subprocess
    import sys

    from tests.servers import START_TIMEOUT, free_port, wait_for_port

    command = [sys.executable, "-m", "kafkaesque", "--redis-url", redis_url, "console"]
    port = free_port()
    console = subprocess.Popen(
        [*command, "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True
    )
    try:
        wait_for_port(port, console, timeout=START_TIMEOUT)
        assert console.stdout is not None
        assert console.stdout.readline().strip() == f"console: http://127.0.0.1:{port}/"
        with socket.create_connection(("127.0.0.1", port)) as probe:
            probe.sendall(b"GET /topics HTTP/1.0\r\n\r\n")
            assert b"200 OK" in probe.recv(100)
        taken = subprocess.run(
            [*command, "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True
        )
        assert taken.returncode == 1
        assert taken.stderr.strip() == (
            f"Error: cannot listen on 127.0.0.1:{port}: address already in use"
        )
    finally:
        console.terminate()
        assert console.wait(20) == 0


def test_live_tail_streams_appends_and_says_when_the_topic_goes(redis_url: str) -> None:
    async def scenario(client: TestClient, log: Log) -> None:
        stream = await client.get("/topics/words/tail/events")
        assert stream.headers["Content-Type"] == "text/event-stream"
        await log.append("words", 1, [build_batch([b"fresh\nline"])])

        async def event() -> tuple[str, str]:
            lines: list[str] = []
            while True:
                line = (await stream.content.readline()).decode().rstrip("\n")
                if line.startswith(":"):
                    continue
                if not line and lines:
                    fields = dict(item.split(": ", 1) for item in lines)
                    return fields["event"], fields["data"]
                if line:
                    lines.append(line)

        kind, row = await asyncio.wait_for(event(), 20)
        assert kind == "record" and ">1/1<" in row and "fresh&#10;line" in row
        await log.delete_topic("words")
        kind, text = await asyncio.wait_for(event(), 20)
        assert kind == "problem" and "words" in text
        stream.close()

    run(redis_url, scenario)


def test_a_store_away_is_said_not_shown_as_a_traceback() -> None:
    from tests.servers import free_port

    async def main() -> None:
        log = Log(redis_client(f"redis://127.0.0.1:{free_port()}/0"))  # nothing listens
        state = make_console(log, sample_seconds=3600)
        try:
            async with TestClient(TestServer(build_app(state))) as client:
                for url in ("/topics", "/topics/words/messages", "/groups"):
                    html = await page(client, url, 503)
                    assert any("cannot reach Redis" in e for e in shown_errors(html)), html
        finally:
            await log.stores.close()

    asyncio.run(main())


def test_an_archive_away_is_said_too(redis_url: str) -> None:
    from storage_pg.tiered import Archive, attach
    from tests.servers import free_port

    async def scenario(client: TestClient, log: Log) -> None:
        archive = Archive(f"postgresql://nobody@127.0.0.1:{free_port()}/none")
        attach(log, archive)
        client.app[CONSOLE].archive = archive
        html = await page(client, "/archive", 503)
        assert shown_errors(html), html
        # Redis still holds every record from offset 0: the archive is not asked
        assert "5 shown" in await page(client, "/topics/words/messages")
        overview = await page(client, "/overview/health")
        assert "unreachable" in overview

    run(redis_url, scenario)


def passes_shown(html: str) -> list[list[str]]:
    """The cells of the Archive page's table of the archiver's last passes."""
    found = re.search(r'<table id="archive-passes">.*?<tbody>(.*?)</tbody>', html, re.S)
    assert found is not None, html
    rows = re.findall(r"<tr>(.*?)</tr>", found.group(1), re.S)
    return [re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in rows if "empty" not in row]


def test_archive_passes_and_database_headroom(redis_url: str, pg_dsn: str) -> None:
    """An archiver pass that archived records is listed with its rows and rate; an idle
    one adds no row; the Overview shows the archive database's size and connections."""
    from storage_pg.tiered import Archive, attach

    async def scenario(client: TestClient, log: Log) -> None:
        archive = Archive(pg_dsn)
        attach(log, archive)
        await archive.bind()
        client.app[CONSOLE].archive = archive
        try:
            archiver = await archive.archiver(log, idle_close_ms=0)
            assert "holds no archive yet" in await page(client, "/archive")  # nothing ran
            first = await archiver.run_once()
            assert first.rows == 5  # words: 4 records in partition 0, 1 in partition 1
            shown = passes_shown(await page(client, "/archive"))
            assert len(shown) == 1, shown
            finished, took, rows, size, rate, mark, runner = shown[0]
            assert finished[:2] == "20" and took.endswith(" s")
            assert rows == "5" and mark == f"{first.watermark:,}" and ":" in runner
            assert size.endswith("B") and float(rate.replace(",", "")) > 0
            assert (await archiver.run_once()).rows == 0
            assert len(passes_shown(await page(client, "/archive"))) == 1  # idle: no row
            health = await page(client, "/overview/health")
            use = re.search(r"database ([\d.,]+ [KMG]?i?B), (\d+) of (\d+) connections", health)
            assert use is not None, health
            assert 1 <= int(use.group(2)) <= int(use.group(3))  # this console's own, at least
        finally:
            await archive.close()

    run(redis_url, scenario)
