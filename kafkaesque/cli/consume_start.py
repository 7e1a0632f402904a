"""Where ``consume`` starts a partition: its start options (--offset, --from-beginning,
--from-end, --last, --from-time) as one ``Start``, which the direct mode
(consume_direct.py) and the wire mode (wire_records.py) each turn into an offset."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import click

BEGINNING = "beginning"  # the log start
END = "end"  # the log end: only new records
OFFSET = "offset"  # an offset (``value``)
LAST = "last"  # ``value`` offsets before the end
TIME = "time"  # the first record at or after ``value`` (ms since the epoch)


@dataclass(frozen=True)
class Start:
    """The start option given: its kind (BEGINNING, END, OFFSET, LAST, TIME) and number."""

    kind: str
    value: int = 0


def offset_option(value: str | None) -> Start | None:
    """--offset: a number, or beginning/earliest, end/latest."""
    if value is None:
        return None
    named = {"beginning": BEGINNING, "earliest": BEGINNING, "end": END, "latest": END}
    if value.lower() in named:
        return Start(named[value.lower()])
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise click.BadParameter(
            f"expected an offset (0 or more), beginning or end, got {value!r}",
            param_hint="--offset",
        )
    return Start(OFFSET, number)


def parse_time(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 date and time (without a zone: local
    time) as such milliseconds."""
    if text.isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"expected milliseconds since the epoch or an ISO 8601 time, got {text!r}",
            param_hint="--from-time",
        ) from None
    return int(when.timestamp() * 1000)


def start_of(
    offset: Start | None,
    from_beginning: bool,
    from_end: bool,
    last: int | None,
    timestamp: int | None,
) -> Start | None:
    """The start option given (the command allows one at most); None for none."""
    if offset is not None:
        return offset
    if from_beginning:
        return Start(BEGINNING)
    if from_end:
        return Start(END)
    if last is not None:
        return Start(LAST, last)
    return None if timestamp is None else Start(TIME, timestamp)
