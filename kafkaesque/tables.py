"""Plain-text tables for people: the CLI's listings and the Spark report."""

from __future__ import annotations

import re
from collections.abc import Sequence

_NUMBER = re.compile(r"-?[\d,]+(\.\d+)?")
MISSING = "-"


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = ""
) -> list[str]:
    """Rows as columns under their headers, one string per line. Columns holding only
    numbers are right-aligned so digits line up; None is shown as "-"."""
    cells = [[MISSING if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in [list(headers), *cells]) for i in range(len(headers))]
    right = [
        bool(cells) and all(_NUMBER.fullmatch(row[i]) or row[i] == MISSING for row in cells)
        for i in range(len(headers))
    ]

    def line(row: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right, strict=True)
        ]
        return indent + "  ".join(parts).rstrip()

    return [line(headers), *(line(row) for row in cells)]


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``count`` and ``noun``, plural unless it is one: "1 record", "2 records",
    "3 batches" (``plural_form`` for nouns that take more than an "s")."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {plural_form or noun + 's'}"


def json_key(header: str) -> str:
    """A table header as a JSON key: "SESSION LEFT S" -> "session_left_s",
    "CURRENT-OFFSET" -> "current_offset"."""
    return re.sub(r"[^0-9a-z]+", "_", header.lower()).strip("_")


def json_rows(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[dict[str, object]]:
    """Rows as JSON objects keyed by their headers (``json_key``); values as they are
    (None: null), not as the table shows them."""
    keys = [json_key(h) for h in headers]
    return [dict(zip(keys, row, strict=True)) for row in rows]
