"""Records from the command line: produce and consume (as kafka-console-producer and
-consumer)."""

from __future__ import annotations

import os
import re
import signal
import stat
import sys
from typing import TYPE_CHECKING, Any

import click

from kafkaesque.cli.base import (
    Context,
    group_id_option,
    main,
    pass_context,
    run_async,
    topic_argument,
)
from kafkaesque.cli.consume_direct import DirectStarts, consume_direct
from kafkaesque.cli.consume_start import OFFSET, Start, offset_option, parse_time, start_of
from kafkaesque.cli.line_consumer import (
    FORMAT_TOKENS,
    FORMATS,
    compile_format,
)
from kafkaesque.cli.line_producer import BadLine, LineProducer
from kafkaesque.cli.options import check_partitions, checked_topic, choice_option, number_option
from kafkaesque.cli.output import reader_gone
from kafkaesque.cli.wire import no_wire_form, wire_client
from kafkaesque.records.batch import Compression
from kafkaesque.tables import plural

if TYPE_CHECKING:
    from kafkaesque.cli.wire_client import WireClient


def _header_option(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> list[tuple[str, bytes]]:
    """Repeated --header KEY=VALUE, in order (a key may repeat, as Kafka's headers)."""
    headers = []
    for item in value:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}")
        headers.append((key, os.fsencode(text)))
    return headers


def _separator(name: str, value: str | None) -> bytes | None:
    if value == "":
        raise click.BadParameter("must not be empty", param_hint=name)
    return None if value is None else os.fsencode(value)


@main.command()
@topic_argument
@click.argument("file", type=click.File("rb"), default="-")
@number_option("--batch-size", 1024, low=1, high=1_000_000)
@click.option("--partition", type=click.IntRange(0), help="Send every record to this partition.")
@choice_option(
    "--format",
    "fmt",
    choices=["lines", "json"],
    help="lines: each line a value (see the options below); json: each line an object "
    '{"key", "value" (null: a tombstone), "headers" ({"k": "v"} or a list of {key, value}), '
    '"partition", "timestamp"}, as consume --format json prints; blank lines are skipped.',
)
@click.option(
    "--key-separator",
    metavar="SEP",
    help="Split each line at the first SEP into key and value (no SEP: null key).",
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_header_option,
    help="Add this header to every record (repeatable).",
)
@click.option(
    "--parse-headers",
    is_flag=True,
    help="Each line starts with its headers, KEY:VALUE,KEY:VALUE, ended by "
    "--headers-delimiter (as kafka-console-producer's parse.headers).",
)
@click.option(
    "--headers-delimiter",
    metavar="SEP",
    default="\t",
    help="What ends a line's headers with --parse-headers (default: a TAB).",
)
@click.option(
    "--null-marker",
    metavar="TEXT",
    help="A key, value or header value that is exactly TEXT is sent as null (a null "
    "value: a tombstone).",
)
@choice_option("--compression", choices=[c.name.lower() for c in Compression])
@pass_context
@run_async
async def produce(
    ctx: Context,
    topic: str,
    file: Any,
    batch_size: int,
    partition: int | None,
    fmt: str,
    key_separator: str | None,
    headers: list[tuple[str, bytes]],
    parse_headers: bool,
    headers_delimiter: str,
    null_marker: str | None,
    compression: str,
) -> None:
    """Append each line of FILE (default: stdin) to TOPIC as one record.

    A line that is no record (bad JSON, no headers delimiter) stops the run with its
    number: the lines before it were produced, it and those after were not."""
    separator = _separator("--key-separator", key_separator)
    delimiter = _separator("--headers-delimiter", headers_delimiter) if parse_headers else None
    if fmt == "json":
        for name, given in (
            ("--key-separator", key_separator is not None),
            ("--parse-headers", parse_headers),
            ("--null-marker", null_marker is not None),
        ):
            if given:
                raise click.UsageError(f"--format json and {name} exclude each other")
    options: dict[str, Any] = dict(
        batch_size=batch_size,
        partition=partition,
        key_separator=separator,
        headers=headers,
        headers_delimiter=delimiter,
        null_marker=None if null_marker is None else os.fsencode(null_marker),
        json_lines=fmt == "json",
    )
    producer: LineProducer
    if ctx.wire is not None:
        from kafkaesque.cli.wire_records import WireLineProducer

        client = wire_client(ctx.wire)
        count = client.partition_count(topic)
        check_partitions(topic, count, partition)
        producer = WireLineProducer(client, topic, count, compression_name=compression, **options)
    else:
        log = ctx.log()
        await ctx.bind_archives()  # a read from offset 0 may never touch the archive
        config = await log.topic(topic)
        check_partitions(topic, config.partitions, partition)
        producer = LineProducer(
            log, config, compression=Compression[compression.upper()], **options
        )
    size = _file_size(file)
    try:
        if size and sys.stderr.isatty():
            with click.progressbar(length=size, label="producing", file=sys.stderr) as bar:
                summary = await producer.produce(file, bar.update)
        else:
            summary = await producer.produce(file)
    except BadLine as exc:
        done = exc.summary.records if exc.summary is not None else 0
        raise click.ClickException(
            f"{exc}; produced the {plural(done, 'record')} before it to {topic}, "
            "not this line nor those after it"
        ) from None
    rate = summary.records / summary.seconds if summary.seconds else 0.0
    click.echo(
        f"produced {plural(summary.records, 'record')} ({plural(summary.bytes, 'byte')}) "
        f"to {topic} "
        f"in {summary.seconds:.2f} s ({rate:,.0f} records/s)",
        err=True,
    )


def _file_size(file: Any) -> int | None:
    """The size of a regular file, None for pipes and terminals."""
    try:
        st = os.fstat(file.fileno())
    except (OSError, AttributeError, ValueError):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


@main.command()
@click.argument("topics", nargs=-1, metavar="[TOPIC]...")
@click.option(
    "--pattern",
    help="Also read every topic whose whole name matches this regular expression "
    "(following: topics created later too).",
)
@number_option(
    "--fetch-size", 1024, "Records per fetch (whole batches: a fetch may return more).", low=1
)
@click.option("--partition", type=click.IntRange(0), help="Read only this partition.")
@click.option(
    "--offset",
    help="Start at this offset (a number needs --partition), or at beginning/earliest or "
    "end/latest.",
)
@click.option("--from-beginning", is_flag=True, help="Start at the log start (the default).")
@click.option("--from-end", is_flag=True, help="Start at the log end: only new records.")
@click.option(
    "--last", type=click.IntRange(1), help="Start N offsets before the end of each partition."
)
@click.option(
    "--from-time",
    help="Start at each partition's first record at or after this time: milliseconds since "
    "the epoch or ISO 8601 (2026-01-31T12:00:00Z; without a zone, local time).",
)
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new records.")
@click.option("--max-records", type=click.IntRange(1), help="Stop after N records.")
@choice_option(
    "--on-truncation",
    choices=["error", "rewind"],
    help="When Redis lost records already read (the log was truncated below the position): "
    "stop with an error, or rewind to the truncation point and read the new records there.",
)
@click.option(
    "--group",
    callback=group_id_option,
    help="Join consumer group GROUP: read the partitions it assigns (shared with its other "
    "members) from its committed offsets, and commit as records are printed.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["value", "offset", "json"]),
    help="value (the default): the value; offset: partition TAB offset TAB value; json: "
    "topic, partition, offset, timestamp, key, value (null: a tombstone), headers.",
)
@click.option(
    "--format-string",
    help="Print each record as this kcat-style string: " + FORMAT_TOKENS + ".",
)
@choice_option(
    "--isolation",
    choices=["read_committed", "read_uncommitted"],
    help="read_committed: only records of committed transactions, up to the last stable "
    "offset; read_uncommitted: every record, up to the log end.",
)
@pass_context
@run_async
async def consume(
    ctx: Context,
    topics: tuple[str, ...],
    pattern: str | None,
    fetch_size: int,
    partition: int | None,
    offset: str | None,
    from_beginning: bool,
    from_end: bool,
    last: int | None,
    from_time: str | None,
    follow: bool,
    max_records: int | None,
    on_truncation: str,
    group: str | None,
    fmt: str | None,
    format_string: str | None,
    isolation: str,
) -> None:
    """Print the records of TOPIC(s) (or of those --pattern matches), one per line, from
    the beginning to the end of the log; with --group, of the partitions the group assigns."""
    for topic in topics:
        checked_topic(topic, "TOPIC")
    if not topics and pattern is None:
        raise click.UsageError("give a TOPIC or --pattern")
    regex = None
    if pattern is not None:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise click.BadParameter(
                f"not a regular expression: {exc}", param_hint="--pattern"
            ) from None
    start = offset_option(offset)
    starts = [
        name
        for name, given in (
            ("--offset", offset is not None),
            ("--from-beginning", from_beginning),
            ("--from-end", from_end),
            ("--last", last is not None),
            ("--from-time", from_time is not None),
        )
        if given
    ]
    if len(starts) > 1:
        raise click.UsageError(f"{' and '.join(starts)} exclude each other")
    if start is not None and start.kind == OFFSET and partition is None:
        raise click.UsageError("--offset needs --partition for a number (or use beginning, end)")
    if partition is not None and (len(topics) != 1 or pattern is not None):
        raise click.UsageError("--partition needs exactly one TOPIC")
    if group is not None and partition is not None:
        raise click.UsageError(
            "--group and --partition exclude each other (the group assigns the partitions)"
        )
    if fmt is not None and format_string is not None:
        raise click.UsageError("--format and --format-string exclude each other")
    formatter = None
    if format_string is not None:
        try:
            formatter = compile_format(format_string)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--format-string") from None
    timestamp = None if from_time is None else parse_time(from_time)
    start = start_of(start, from_beginning, from_end, last, timestamp)
    read_committed = isolation == "read_committed"
    if ctx.wire is not None:
        no_wire_form(ctx.wire, on_truncation=on_truncation != "error")
        _consume_wire(
            wire_client(ctx.wire, tolerate_down=follow),
            topics,
            pattern,
            partition,
            start,
            group=group,
            follow=follow,
            max_records=max_records,
            fetch_size=fetch_size,
            isolation=isolation,
            formatter=formatter or FORMATS[fmt or "value"],
            line_end=b"" if formatter is not None else b"\n",
        )
        return
    log = ctx.log()
    await ctx.bind_archives()  # a read from offset 0 may never touch the archive
    configs = {t: await log.topic(t) for t in dict.fromkeys(topics)}
    if partition is not None:
        check_partitions(topics[0], configs[topics[0]].partitions, partition)
    direct = DirectStarts(
        log, configs, regex, start, read_committed=read_committed, group=group, follow=follow
    )
    await consume_direct(
        direct,
        None if partition is None else (topics[0], partition),
        pattern=pattern,
        fetch_size=fetch_size,
        fmt=fmt or "value",
        formatter=formatter,
        follow=follow,
        max_records=max_records,
        rewind=on_truncation == "rewind",
    )


def _consume_wire(
    client: WireClient,
    topics: tuple[str, ...],
    pattern: str | None,
    partition: int | None,
    start: Start | None,
    **options: Any,
) -> None:
    """consume in wire mode: the records printed as the direct mode prints them; SIGTERM
    and Ctrl-C leave the group first."""
    from kafkaesque.cli.wire_records import consume as consume_records

    if partition is not None:
        check_partitions(topics[0], client.partition_count(topics[0]), partition)
    terminated = False

    def on_sigterm(signum: int, frame: object) -> None:
        nonlocal terminated
        terminated = True

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        consume_records(
            client,
            topics,
            pattern,
            partition,
            start,
            out=sys.stdout.buffer,
            stopped=lambda: terminated,
            **options,
        )
    except BrokenPipeError:
        reader_gone()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if terminated:
        sys.exit(128 + signal.SIGTERM)
