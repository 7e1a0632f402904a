"""The live tail of a topic: a page whose table fills from Server-Sent Events, each event
a record appended since the page opened, as the Messages page shows records."""

from __future__ import annotations

from aiohttp import web

from kafkaesque.console.context import console, render
from kafkaesque.console.html import Raw, join, path, tag
from kafkaesque.console.messages import record_row, records_table, topic_partitions
from kafkaesque.console.records import bounds, read_forward
from kafkaesque.errors import KafkaesqueError, UnknownTopic
from kafkaesque.hot.log import Log

TAIL_IDLE_SECONDS = 15.0  # a comment line this often keeps proxies from closing the stream
TAIL_CHECK_SECONDS = 1.0  # how often a quiet tail looks whether the console is stopping
TAIL_BURST = 200  # of many records appended at once, the tail shows the newest this many


async def tail_page(request: web.Request) -> web.Response:
    topic, _ = await topic_partitions(request)
    body = join(
        [
            tag(
                "p",
                join(
                    [
                        "Records appear here as they are appended. ",
                        tag("span", "connecting", id="tail-status", class_="muted"),
                    ]
                ),
            ),
            tag(
                "div",
                records_table([], "tail", "waiting for new records\u2026"),
                data_tail=path("topics", topic, "tail", "events"),
            ),
        ]
    )
    return render(request, f"Live tail of {topic}", body, "/topics")


async def tail_events(request: web.Request) -> web.StreamResponse:
    """Server-Sent Events: each record appended from now on, as a table row (of a burst,
    the newest TAIL_BURST). Woken by appends, and every TAIL_CHECK_SECONDS it looks at the
    log ends anyway (a notification may come before the subscription to it is made). Ends
    when the viewer goes away, the topic does, or the console stops."""
    state = console(request)
    topic, partitions = await topic_partitions(request)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    quiet = 0.0
    try:
        async with state.layer.appends([topic]) as appended:
            positions = await _ends(state.log, topic, partitions)
            await response.prepare(request)  # the page says "following" from here on
            while not state.closing.is_set():
                if await appended.wait(TAIL_CHECK_SECONDS):
                    appended.take()
                ends = await _ends(state.log, topic, partitions)
                sent = False
                for p, end in ends.items():
                    if end <= positions[p]:
                        continue
                    where = await bounds(state.layer, topic, p)
                    start = max(positions[p], where.end - TAIL_BURST)
                    for record in await read_forward(
                        state.layer, topic, p, start, TAIL_BURST, where
                    ):
                        row = record_row(topic, record, "auto")
                        row = Raw(row.replace("\n", "&#10;").replace("\r", "&#13;"))
                        await response.write(f"event: record\ndata: {row}\n\n".encode())
                        sent = True
                    positions[p] = where.end
                quiet = 0.0 if sent else quiet + TAIL_CHECK_SECONDS
                if quiet >= TAIL_IDLE_SECONDS:  # keeps proxies from closing the stream
                    await response.write(b": idle\n\n")
                    quiet = 0.0
    except KafkaesqueError as exc:  # the topic was deleted, Redis went away, ...
        if not response.prepared:
            raise
        await response.write(f"event: problem\ndata: {exc}\n\n".encode())
    except ConnectionResetError:  # the viewer went away
        pass
    return response


async def _ends(log: Log, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's log end, in one round trip; UnknownTopic once the topic is gone."""
    found = await log.partition_offsets([(topic, p) for p in range(partitions)])
    if any(entry is None for entry in found):
        raise UnknownTopic(f"topic {topic} was deleted")
    return {p: entry[1] for p, entry in enumerate(found) if entry is not None}
