"""The listings' and descriptions' output form: ``--format table`` (people, the default)
or ``--format json`` (scripts: one JSON document on stdout). Every listing and description
command takes the option from here and prints through ``echo_rows`` / ``echo_document``."""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from kafkaesque.tables import format_table, json_rows

Command = TypeVar("Command", bound=Callable[..., Any])

TABLE = "table"
JSON = "json"

# The same spelling as consume's --format (which formats records).
format_option: Callable[[Command], Command] = click.option(
    "--format",
    "output_format",
    type=click.Choice([TABLE, JSON]),
    default=TABLE,
    show_default=True,
    help="table for people, json for scripts (one JSON document on stdout).",
)


def kafka_uuid(value: bytes) -> str:
    """A topic id as Kafka prints one (URL-safe base64, unpadded)."""
    return base64.urlsafe_b64encode(value).rstrip(b"=").decode()


def echo_json(document: object) -> None:
    """One JSON document on stdout."""
    click.echo(json.dumps(document, indent=2, sort_keys=False, default=str))


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print rows as columns under their headers (numbers right-aligned)."""
    for line in format_table(headers, rows):
        click.echo(line)


def echo_rows(
    output_format: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    empty: str | None = None,
) -> None:
    """A listing: as a table (with ``empty``, when there are no rows, said on stderr
    instead, so stdout stays a table, empty), or as a JSON array of objects keyed by the
    headers in snake case."""
    if output_format == JSON:
        echo_json(json_rows(headers, rows))
    elif rows or empty is None:
        echo_table(headers, rows)
    else:
        click.echo(empty, err=True)


def echo_document(output_format: str, document: dict[str, Any], text: Callable[[], None]) -> None:
    """A description: ``document`` as JSON, or ``text`` prints it for people."""
    if output_format == JSON:
        echo_json(document)
    else:
        text()


def reader_gone() -> None:
    """stdout's reader went away (``| head``): what is still written goes nowhere, so the
    command stops quietly, as Unix tools do."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
