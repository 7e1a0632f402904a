"""HTML for the console's pages: every value is escaped unless it is ``Raw`` (HTML built
here), the layout around each page, tables, forms, sparklines and the formats of numbers
and times."""

from __future__ import annotations

import datetime
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlencode

NAV = [
    ("/", "Overview"),
    ("/topics", "Topics"),
    ("/groups", "Groups"),
    ("/archive", "Archive"),
    ("/security", "Security"),
]


class Raw(str):
    """HTML that is already safe (built by these helpers): never escaped again."""


def esc(value: object) -> str:
    """``value`` as HTML text; Raw as it is; None as a dash."""
    if isinstance(value, Raw):
        return value
    if value is None:
        return "\u2013"
    return html.escape(str(value), quote=True)


def join(parts: Iterable[object]) -> Raw:
    return Raw("".join(esc(p) for p in parts))


def _attributes(attributes: dict[str, object]) -> str:
    """Attributes as HTML: one whose value is None or False is left out, True is written
    bare; a trailing underscore is dropped (``class_``), other underscores become dashes."""
    written = []
    for key, value in attributes.items():
        if value is None or value is False:
            continue
        key = key.rstrip("_").replace("_", "-")
        written.append(f" {key}" if value is True else f' {key}="{esc(value)}"')
    return "".join(written)


def tag(element: str, content: object = "", /, **attributes: object) -> Raw:
    """<name attributes>content</name> (see ``_attributes``)."""
    opened = f"<{element}{_attributes(attributes)}>" if attributes else f"<{element}>"
    return Raw(f"{opened}{esc(content)}</{element}>")


def void(element: str, /, **attributes: object) -> Raw:
    """An element without content (input)."""
    return Raw(f"<{element}{_attributes(attributes)}>")


def link(href: str, text: object, **attributes: object) -> Raw:
    return tag("a", text, href=href, **attributes)


def path(*parts: str) -> str:
    """A URL path of ``parts``, each quoted (a topic or group name may hold any character
    a URL does not)."""
    return "/" + "/".join(quote(part, safe="") for part in parts)


def query(base: str, **params: object) -> str:
    """``base`` with ``params`` (those not None) as its query string."""
    given = {k: v for k, v in params.items() if v is not None and v != ""}
    return f"{base}?{urlencode(given)}" if given else base


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    numeric: Iterable[int] = (),
    empty: str = "nothing to show",
    **attributes: object,
) -> Raw:
    """A table; the columns numbered in ``numeric`` are right-aligned."""
    right = set(numeric)
    head = join(tag("th", h, class_="num" if i in right else None) for i, h in enumerate(headers))
    # the cells' opening tags once per column: a table of thousands of rows renders in
    # a few milliseconds
    opening = ['<td class="num">' if i in right else "<td>" for i in range(len(headers))]
    body = [
        "<tr>" + "".join(f"{opening[i]}{esc(v)}</td>" for i, v in enumerate(row)) + "</tr>"
        for row in rows
    ]
    if not body:
        body = [tag("tr", tag("td", empty, colspan=len(headers), class_="empty"))]
    content = Raw(f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>")
    return tag("table", content, **attributes)


def facts(pairs: Iterable[tuple[str, object]]) -> Raw:
    """Label/value pairs as a definition list."""
    return tag("dl", join(join([tag("dt", k), tag("dd", v)]) for k, v in pairs), class_="facts")


def message(text: object, kind: str = "error") -> Raw:
    """A box saying something went wrong (``error``), or went well (``ok``)."""
    return tag("div", text, class_=f"message {kind}", role="alert" if kind == "error" else None)


def hidden(name: str, value: object) -> Raw:
    return void("input", type="hidden", name=name, value=value)


def field(label: str, name: str, value: object = "", **attributes: object) -> Raw:
    """A labelled input (``type`` text unless given)."""
    attributes.setdefault("type", "text")
    return tag(
        "label", join([tag("span", label), void("input", name=name, value=value, **attributes)])
    )


def user_password(autocomplete: str, /, **user: object) -> Raw:
    """Required user and password inputs (``user``: the user input's further attributes);
    ``autocomplete`` is the password's: current-password to log in, new-password to set one."""
    return join(
        [
            field("User", "user", "", required=True, **user),
            field(
                "Password",
                "password",
                "",
                type="password",
                required=True,
                autocomplete=autocomplete,
            ),
        ]
    )


def select(label: str, name: str, options: Sequence[tuple[str, str]], chosen: str) -> Raw:
    items = join(
        tag("option", text, value=value, selected=value == chosen) for value, text in options
    )
    return tag("label", join([tag("span", label), tag("select", items, name=name)]))


def form(
    action: str,
    content: object,
    submit: str,
    *,
    csrf: str | None = None,
    method: str = "post",
    danger: bool = False,
    **attributes: object,
) -> Raw:
    """A form; a POST one carries the session's CSRF token."""
    token = hidden("csrf", csrf) if method == "post" and csrf is not None else Raw("")
    button = tag("button", submit, type="submit", class_="danger" if danger else None)
    return tag(
        "form",
        join([token, content, button]),
        action=action,
        method=method,
        **{"class_": "inline", **attributes},
    )


def sparkline(values: Sequence[float], width: int = 140, height: int = 28) -> Raw:
    """A small inline SVG line of ``values`` (oldest first), scaled between their least and
    largest (a flat series is a line across the middle)."""
    if len(values) < 2:
        return Raw('<span class="muted">collecting\u2026</span>')
    low, top = min(values), max(values)
    step = width / (len(values) - 1)

    def y(v: float) -> float:
        return height / 2 if top == low else height - 2 - (v - low) / (top - low) * (height - 4)

    points = " ".join(f"{i * step:.1f},{y(v):.1f}" for i, v in enumerate(values))
    label = f"from {values[0]:g} to {values[-1]:g}, between {low:g} and {top:g}"
    return Raw(
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{esc(label)}"><title>{esc(label)}</title>'
        f'<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{points}"/></svg>'
    )


def when(ms: int | None) -> str | None:
    """A timestamp in ms as UTC date and time to the millisecond; None for none (-1)."""
    if ms is None or ms < 0:
        return None
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def duration(seconds: float) -> str:
    """A span of time for people: 4.2 s, 3 min 5 s, 2 h 10 min, 12 d 3 h."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    for unit, span, smaller, smaller_span in (
        ("d", 86_400, "h", 3600),
        ("h", 3600, "min", 60),
        ("min", 60, "s", 1),
    ):
        if whole >= span:
            return f"{whole // span:,} {unit} {(whole % span) // smaller_span} {smaller}"
    return f"{seconds:.1f} s"  # unreachable: seconds >= 60 is at least a minute


def size(n: int | None) -> str | None:
    if n is None:
        return None
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n = n / 1024  # type: ignore[assignment]
    return None


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who looks, as the layout shows it: the user (None: nobody logs in), the CSRF token
    of the session, and whether changes are offered (admin mode)."""

    user: str | None
    csrf: str
    admin: bool
    login: bool  # whether the broker has users, so a login is needed


def layout(
    title: str, body: object, viewer: Viewer | None, current: str = "", csrf: str = ""
) -> Raw:
    """The whole page: navigation, the mode, the user, ``body``; without a ``viewer``
    (the login page) no navigation, and ``csrf`` the session's token."""
    nav = join(
        link(href, text, class_="current" if href == current else None) for href, text in NAV
    )
    right: list[object] = []
    if viewer is not None:
        mode = "admin" if viewer.admin else "read-only"
        right.append(
            tag(
                "span",
                mode,
                class_=f"mode {mode}",
                title="started with --admin"
                if viewer.admin
                else "start with --admin to make changes",
            )
        )
        if viewer.user is not None:
            right.append(tag("span", f"User:{viewer.user}", class_="user"))
            right.append(form("/logout", "", "Log out", csrf=viewer.csrf))
    header = tag(
        "header",
        join(
            [
                link("/", "kafkaesque", class_="brand"),
                tag("nav", nav) if viewer else "",
                tag("div", join(right), class_="who"),
            ]
        ),
    )
    csrf = viewer.csrf if viewer is not None else csrf
    return Raw(
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="csrf" content="{esc(csrf)}">'
        f"<title>{esc(title)} \u00b7 kafkaesque</title>"
        '<link rel="stylesheet" href="/static/console.css">'
        '<script src="/static/console.js" defer></script></head><body>'
        f"{header}<main>{tag('h1', title)}{esc(body)}</main></body></html>"
    )
