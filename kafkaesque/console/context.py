"""What every page handler shares: the console's state (``Console``, held by the aiohttp
application), the viewer of a request, rendering a page, ACL checks and form input."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from kafkaesque.console.access import CLUSTER_NAME, Access, Session
from kafkaesque.console.html import Raw, Viewer, layout
from kafkaesque.console.sampler import Sampler
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import Partitions
from kafkaesque.security.acls import Operation, ResourceType

if TYPE_CHECKING:
    from storage_pg.tiered import Archive

MAX_FORM_BYTES = 1 << 20  # a produced value, at most (aiohttp's client_max_size)


class Refused(Exception):
    """The viewer may not do this (the ACLs), said on the page (403)."""


@dataclass
class Console:
    """One console: the layers it reads through and its settings."""

    log: Log
    layer: Partitions
    groups: GroupCoordinator
    access: Access
    sampler: Sampler
    admin: bool  # changes offered (and their endpoints routed) only then
    archive: Archive | None = None  # the archive the log reads old offsets from
    spark_exports: tuple[str, ...] = ()  # local output directories of `kafkaesque spark export`
    # set when the console stops: live streams (the tail) end
    closing: asyncio.Event = field(default_factory=asyncio.Event)


CONSOLE = web.AppKey("console", Console)
SESSION = web.RequestKey("session", Session)  # the request's session
LOGIN = web.RequestKey("login", bool)  # whether the broker has users (a login is needed)


def console(request: web.Request) -> Console:
    return request.app[CONSOLE]


def session(request: web.Request) -> Session:
    return request[SESSION]


def viewer(request: web.Request) -> Viewer:
    s = session(request)
    return Viewer(s.user, s.csrf, console(request).admin, request.get(LOGIN, False))


def render(
    request: web.Request, title: str, body: object, current: str = "", status: int = 200
) -> web.Response:
    """The whole page around ``body``."""
    return web.Response(
        text=layout(title, body, viewer(request), current),
        content_type="text/html",
        status=status,
        headers=NO_STORE,
    )


def fragment(body: Raw) -> web.Response:
    """A piece of a page, for the script's polling."""
    return web.Response(text=body, content_type="text/html", headers=NO_STORE)


NO_STORE = {"Cache-Control": "no-store"}


def may(request: web.Request, operation: Operation, resource_type: ResourceType, name: str) -> bool:
    """Whether the viewer may do ``operation`` on the resource (always, without a login)."""
    return console(request).access.may(
        session(request).user, request.remote or "", operation, resource_type, name
    )


def may_see_topic(request: web.Request, topic: str) -> bool:
    return may(request, Operation.DESCRIBE, ResourceType.TOPIC, topic)


def may_see_group(request: web.Request, group: str) -> bool:
    return may(request, Operation.DESCRIBE, ResourceType.GROUP, group)


def require(
    request: web.Request, operation: Operation, resource_type: ResourceType, name: str
) -> None:
    """Refused unless the viewer may do ``operation`` on the resource."""
    if not may(request, operation, resource_type, name):
        what = (
            "the cluster"
            if resource_type == ResourceType.CLUSTER
            else f"{resource_type.name.lower()} {name}"
        )
        raise Refused(f"User:{session(request).user} may not {operation.name} {what} (ACLs)")


def require_cluster(request: web.Request, operation: Operation) -> None:
    require(request, operation, ResourceType.CLUSTER, CLUSTER_NAME)


async def posted(request: web.Request) -> Mapping[str, str]:
    """The POSTed form's text fields (its CSRF token already checked)."""
    data = await request.post()
    return {k: v for k, v in data.items() if isinstance(v, str)}
