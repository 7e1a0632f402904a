"""The Messages pages of a topic: browse newest first or from an offset or a time, across
Redis and the archive (each record says which tier it came from), with values decoded as
JSON, text or hex; search with a scan limit; one message on its own page; export of what
is shown as JSON or CSV (capped); a live tail over Server-Sent Events; and, in admin mode,
producing a message. The live tail is tail.py."""

from __future__ import annotations

import base64
import csv
import io
import json
import time
from collections.abc import Mapping

from aiohttp import web

from kafkaesque.console import html
from kafkaesque.console.context import console, may_see_topic, posted, render, require, session
from kafkaesque.console.records import (
    EXPORT_CAP,
    FORMATS,
    BadInput,
    Query,
    Shown,
    bounds,
    decode,
    find,
    parse_query,
    read_forward,
)
from kafkaesque.errors import UnknownTopic
from kafkaesque.records.build import build_batch
from kafkaesque.records.partitioner import partition_for_key
from kafkaesque.security.acls import Operation, ResourceType


async def topic_partitions(request: web.Request) -> tuple[str, int]:
    name = request.match_info["topic"]
    if not may_see_topic(request, name):
        raise UnknownTopic(f"no such topic: {name}")
    return name, (await console(request).log.topic(name)).partitions


def value_cell(data: bytes | None, wanted: str, whole: bool = False) -> html.Raw:
    kind, text = decode(data, wanted, whole)
    if kind == "null":
        return html.tag("span", "null", class_="muted")
    return html.join(
        [
            html.tag("span", kind, class_="fmt"),
            html.tag("pre", text, class_="value full" if whole else "value"),
        ]
    )


def headers_cell(record: Shown, wanted: str) -> html.Raw:
    if not record.headers:
        return html.Raw("")
    return html.join(
        html.tag(
            "div",
            html.join(
                [
                    html.tag("b", name),
                    ": ",
                    decode(value, wanted)[1] if value is not None else "null",
                ]
            ),
        )
        for name, value in record.headers
    )


def record_row(topic: str, record: Shown, wanted: str) -> html.Raw:
    cells = [
        html.link(
            html.path("topics", topic, "messages", str(record.partition), str(record.offset)),
            f"{record.partition}/{record.offset}",
        ),
        html.tag("span", record.tier, class_=f"tier {record.tier}"),
        html.when(record.timestamp),
        value_cell(record.key, wanted),
        value_cell(record.value, wanted),
        headers_cell(record, wanted),
    ]
    return html.tag("tr", html.join(html.tag("td", c) for c in cells))


RECORD_HEADERS = ["Partition/offset", "Tier", "Timestamp", "Key", "Value", "Headers"]


async def browse(request: web.Request) -> web.Response:
    state = console(request)
    topic, partitions = await topic_partitions(request)
    params = request.query
    body: list[object] = [query_form(topic, partitions, params)]
    if "done" in params:
        body.append(html.message(params["done"], "ok"))
    try:
        wanted = parse_query(params, partitions)
    except BadInput as exc:
        body.append(html.message(str(exc)))
        return render(request, f"Messages of {topic}", html.join(body), "/topics", status=400)
    try:
        found = await find(state.layer, topic, partitions, wanted)
    except BadInput as exc:
        body.append(html.message(str(exc)))
        return render(request, f"Messages of {topic}", html.join(body), "/topics", status=400)
    for note in found.notes:
        body.append(html.message(note, "note"))
    summary = f"{len(found.records):,} shown"
    if wanted.search:
        summary += f" matching {wanted.search!r} among {found.scanned:,} records read"
        if found.scan_limited:
            summary += (
                f" (the scan limit, {wanted.scan:,}, was reached: older records were not searched)"
            )
    exports = html.join(
        [
            html.link(
                html.query(html.path("topics", topic, "export"), **{**params, "as": "json"}),
                "export JSON",
            ),
            " \u00b7 ",
            html.link(
                html.query(html.path("topics", topic, "export"), **{**params, "as": "csv"}),
                "export CSV",
            ),
            " \u00b7 ",
            html.link(html.path("topics", topic, "tail"), "live tail"),
            " \u00b7 ",
            html.link(html.path("topics", topic), "topic details"),
        ]
    )
    body.append(
        html.tag(
            "div",
            html.join([html.tag("span", summary, id="summary"), html.tag("span", exports)]),
            class_="toolbar",
        )
    )
    rows = [record_row(topic, r, wanted.format) for r in found.records]
    body.append(records_table(rows, "messages"))
    body.append(paging(topic, params, wanted, found.records))
    if state.admin:
        body.append(html.tag("h2", "Produce a message"))
        body.append(produce_form(request, topic, partitions))
    return render(request, f"Messages of {topic}", html.join(body), "/topics")


def paging(topic: str, params: Mapping[str, str], wanted: Query, shown: list[Shown]) -> html.Raw:
    """On one partition, a link to the records before those shown (newest first) or
    after them (from an offset or a time)."""
    if wanted.partition is None or not shown:
        return html.Raw("")
    kept = {
        k: v for k, v in params.items() if k in ("partition", "limit", "search", "scan", "format")
    }
    base = html.path("topics", topic, "messages")
    if wanted.start == "newest":
        oldest = min(r.offset for r in shown)
        if oldest == 0:
            return html.Raw("")
        return html.tag(
            "p",
            html.link(
                html.query(base, **kept, start="newest", before=oldest), "\u2190 older records"
            ),
            id="paging",
        )
    latest = max(r.offset for r in shown)
    return html.tag(
        "p",
        html.link(
            html.query(base, **kept, start="offset", offset=latest + 1), "later records \u2192"
        ),
        id="paging",
    )


def records_table(rows: list[html.Raw], table_id: str, empty: str = "no records") -> html.Raw:
    head = html.tag("thead", html.tag("tr", html.join(html.tag("th", h) for h in RECORD_HEADERS)))
    if not rows:
        rows = [html.tag("tr", html.tag("td", empty, colspan=len(RECORD_HEADERS), class_="empty"))]
    return html.tag(
        "table",
        html.join([head, html.tag("tbody", html.join(rows))]),
        id=table_id,
        class_="records",
    )


def query_form(topic: str, partitions: int, params: Mapping[str, str]) -> html.Raw:
    choices = [("all", "all")] + [(str(p), str(p)) for p in range(partitions)]
    content = html.join(
        [
            html.select("Partition", "partition", choices, params.get("partition", "all")),
            html.select(
                "Start",
                "start",
                [("newest", "newest first"), ("offset", "from offset"), ("time", "from time")],
                params.get("start", "newest"),
            ),
            html.field("Offset", "offset", params.get("offset", ""), size=10),
            html.field(
                "Time (ISO 8601, UTC)",
                "time",
                params.get("time", ""),
                size=22,
                placeholder="2024-05-01T12:00:00Z",
            ),
            html.field("Limit", "limit", params.get("limit", "50"), size=5),
            html.field("Search key/value/headers", "search", params.get("search", ""), size=18),
            html.field("Scan limit", "scan", params.get("scan", "10000"), size=7),
            html.select(
                "Show as", "format", [(f, f) for f in FORMATS], params.get("format", "auto")
            ),
        ]
    )
    return html.form(
        html.path("topics", topic, "messages"), content, "Show", method="get", id="query"
    )


async def one_message(request: web.Request) -> web.Response:
    state = console(request)
    topic, partitions = await topic_partitions(request)
    text_partition, text_offset = request.match_info["partition"], request.match_info["offset"]
    if not (text_partition.isdigit() and text_offset.isdigit()):
        raise BadInput("a message is named by its partition and offset, both whole numbers")
    partition, offset = int(text_partition), int(text_offset)
    if partition >= partitions:
        raise BadInput(f"topic {topic} has no partition {partition} (it has {partitions})")
    where = await bounds(state.layer, topic, partition)
    found = (
        await read_forward(state.layer, topic, partition, offset, 1, where)
        if offset < where.end
        else []
    )
    if not found or found[0].offset != offset:
        why = (
            f"offset {offset:,} is past the end of partition {partition} "
            f"(next offset {where.end:,})"
            if offset >= where.end
            else f"there is no record at offset {offset:,} of partition {partition} "
            "(removed, compacted, or a transaction marker)"
        )
        raise BadInput(why)
    record = found[0]
    wanted = request.query.get("format", "auto")
    if wanted not in FORMATS:
        raise BadInput(f"format must be one of {', '.join(FORMATS)}")
    body = html.join(
        [
            html.tag(
                "dl",
                html.join(
                    html.join([html.tag("dt", k), html.tag("dd", v)])
                    for k, v in [
                        ("topic", html.link(html.path("topics", topic, "messages"), topic)),
                        ("partition", partition),
                        ("offset", f"{offset:,}"),
                        ("tier", html.tag("span", record.tier, class_=f"tier {record.tier}")),
                        ("timestamp", f"{html.when(record.timestamp)} ({record.timestamp})"),
                        ("key", value_cell(record.key, wanted, whole=True)),
                        ("value", value_cell(record.value, wanted, whole=True)),
                        ("headers", headers_cell(record, wanted) or "none"),
                    ]
                ),
                class_="facts",
                id="message",
            ),
            html.tag(
                "p",
                html.join(
                    x
                    for f in FORMATS
                    for x in (
                        html.link(html.query(request.rel_url.raw_path, format=f), f"show as {f}"),
                        "  ",
                    )
                ),
            ),
        ]
    )
    return render(request, f"{topic} [{partition}] @ {offset}", body, "/topics")


async def export(request: web.Request) -> web.Response:
    """What the Messages page shows for the same query, as JSON or CSV, at most
    EXPORT_CAP records; bytes as UTF-8 text where they are, else base64."""
    state = console(request)
    topic, partitions = await topic_partitions(request)
    kind = request.query.get("as", "json")
    if kind not in ("json", "csv"):
        raise BadInput("export as json or csv")
    wanted = parse_query(request.query, partitions, cap=EXPORT_CAP)
    found = await find(state.layer, topic, partitions, wanted)
    rows = [exported(r) for r in found.records]
    name = f"{topic}-{int(time.time())}.{kind}"
    disposition = {"Content-Disposition": f'attachment; filename="{name}"'}
    if kind == "json":
        return web.Response(
            text=json.dumps(rows, indent=1), content_type="application/json", headers=disposition
        )
    out = io.StringIO()
    writer = csv.writer(out)
    columns = ["partition", "offset", "tier", "timestamp", "key", "value", "headers"]
    writer.writerow(columns)
    for row in rows:
        writer.writerow([row[c] if c != "headers" else json.dumps(row[c]) for c in columns])
    return web.Response(text=out.getvalue(), content_type="text/csv", headers=disposition)


def _text_or_base64(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


def exported(record: Shown) -> dict[str, object]:
    return {
        "partition": record.partition,
        "offset": record.offset,
        "tier": record.tier,
        "timestamp": record.timestamp,
        "key": _text_or_base64(record.key),
        "value": _text_or_base64(record.value),
        "headers": [[k, _text_or_base64(v)] for k, v in record.headers],
    }


def produce_form(request: web.Request, topic: str, partitions: int) -> html.Raw:
    choices = [("", "by key (or 0)")] + [(str(p), str(p)) for p in range(partitions)]
    content = html.join(
        [
            html.select("Partition", "partition", choices, ""),
            html.field("Key", "key", "", size=16),
            html.tag(
                "label",
                html.join(
                    [
                        html.tag("span", "Value"),
                        html.tag("textarea", "", name="value", rows=3, cols=60),
                    ]
                ),
            ),
            html.field("Headers (name=value, comma separated)", "headers", "", size=30),
        ]
    )
    return html.form(
        html.path("topics", topic, "produce"),
        content,
        "Produce",
        csrf=session(request).csrf,
        id="produce",
    )


async def produce(request: web.Request) -> web.Response:
    state = console(request)
    topic, partitions = await topic_partitions(request)
    require(request, Operation.WRITE, ResourceType.TOPIC, topic)
    data = await posted(request)
    key = data.get("key", "").encode() or None
    chosen = data.get("partition", "").strip()
    if chosen:
        if not chosen.isdigit() or int(chosen) >= partitions:
            raise BadInput(f"partition must be between 0 and {partitions - 1}")
        partition = int(chosen)
    else:
        partition = partition_for_key(key, partitions) if key is not None else 0
    headers: list[tuple[str, bytes | None]] = []
    for part in (p.strip() for p in data.get("headers", "").split(",")):
        if part:
            name, sep, value = part.partition("=")
            if not sep or not name.strip():
                raise BadInput(f"a header is name=value, not {part!r}")
            headers.append((name.strip(), value.strip().encode()))
    batch = build_batch([data.get("value", "").encode()], [key], headers=[headers])
    appended = await state.layer.append(topic, partition, [batch])
    done = f"produced to partition {partition} at offset {appended.base_offset}"
    raise web.HTTPSeeOther(
        html.query(html.path("topics", topic, "messages"), partition=partition, done=done)
    )
