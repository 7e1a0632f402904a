"""The console's aiohttp application: its routes (the change endpoints only in admin
mode: a read-only console has none to answer), the middlewares (sessions and login,
CSRF on every POST, errors as readable pages, never a stack trace), the login page, and
``serve_console``, which runs it for ``kafkaesque console`` and ``serve --console``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from kafkaesque.console import archive, groups, messages, overview, security, tail, topics
from kafkaesque.console.access import COOKIE, SESSION_SECONDS, Access
from kafkaesque.console.assets import CSS, JS
from kafkaesque.console.context import (
    CONSOLE,
    LOGIN,
    MAX_FORM_BYTES,
    SESSION,
    Console,
    Refused,
    posted,
    render,
    session,
)
from kafkaesque.console.html import form, hidden, join, layout, message, query, tag, user_password
from kafkaesque.console.records import BadInput
from kafkaesque.console.sampler import Sampler
from kafkaesque.errors import KafkaesqueError, StorageUnavailable, UnknownTopic
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.hot.log import Log
from kafkaesque.hot.redis_errors import failure_message as redis_failure
from kafkaesque.partition.layer import Partitions

if TYPE_CHECKING:
    from storage_pg.tiered import Archive

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_PATHS = ("/login", "/static/")  # reachable without a login
SHUTDOWN_SECONDS = 3.0  # requests still running when the console stops get this long


def problem(exc: BaseException) -> tuple[int, str] | None:
    """The HTTP status and one sentence for an expected failure; None for a bug."""
    if isinstance(exc, BadInput):
        return 400, str(exc)
    if isinstance(exc, Refused):
        return 403, str(exc)
    if isinstance(exc, UnknownTopic):
        return 404, f"{exc} (deleted, or never created)"
    if isinstance(exc, StorageUnavailable):
        return 503, f"{exc} (try again shortly)"
    if isinstance(exc, KafkaesqueError):
        return 400, str(exc)
    text = redis_failure(exc)
    if text is not None:
        return 503, text
    if isinstance(exc, OSError | asyncio.TimeoutError):
        return 503, f"a store did not answer: {exc}"
    if "storage_pg" not in sys.modules:  # loaded only by a console with an archive
        return None
    from storage_pg.pool import describe_failure

    text = describe_failure(exc)
    return None if text is None else (503, text)


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Failures as a page saying what went wrong in one sentence: bad input, refusals, a
    store away; anything else is logged with its traceback (stderr) and said to be a
    bug, never shown as a stack trace."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        found = problem(exc)
        if found is None:
            log.exception("console: %s %s failed", request.method, request.path)
            found = 500, f"internal error ({type(exc).__name__}); the console's log has the details"
        status, text = found
        if SESSION not in request:
            return web.Response(
                text=layout("Error", message(text), None), content_type="text/html", status=status
            )
        return render(
            request,
            "Something went wrong" if status >= 500 else "Cannot do that",
            message(text),
            status=status,
        )


@web.middleware
async def sessions(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every request gets its session; with SASL users a login is needed first; a POST
    without the session's CSRF token is refused (403), before any handler runs."""
    state: Console = request.app[CONSOLE]
    found, created = state.access.session(request.cookies.get(COOKIE))
    request[SESSION] = found
    request[LOGIN] = await state.access.login_required()
    if request[LOGIN]:
        await state.access.refresh()
    open_path = request.path.startswith(OPEN_PATHS)
    if request.method == "POST" and not open_path:
        token = (await request.post()).get("csrf") or request.headers.get("X-CSRF-Token")
        if not state.access.csrf_ok(found, token if isinstance(token, str) else None):
            response: web.StreamResponse = render(
                request,
                "Refused",
                message(
                    "refused: this form has no valid CSRF token (reload the page and try again)"
                ),
                status=403,
            )
            return _with_cookie(response, found.id if created else None)
    if request[LOGIN] and found.user is None and not open_path:
        if request.method == "GET" and not request.path.endswith(("/lag", "/events", "/health")):
            redirect = web.HTTPSeeOther(query("/login", next=request.path_qs))
            _with_cookie(redirect, found.id if created else None)
            raise redirect
        response = web.Response(text="log in first", status=401)
        return _with_cookie(response, found.id if created else None)
    try:
        response = await handler(request)
    except web.HTTPException as exc:  # redirects after a change, or a login
        current = request[SESSION]
        _with_cookie(exc, current.id if created or current is not found else None)
        raise
    current = request[SESSION]
    return _with_cookie(response, current.id if created or current is not found else None)


def _with_cookie(response: web.StreamResponse, session_id: str | None) -> web.StreamResponse:
    if session_id is not None and not response.prepared:
        response.set_cookie(
            COOKIE, session_id, max_age=SESSION_SECONDS, httponly=True, samesite="Strict", path="/"
        )
    return response


async def login_page(
    request: web.Request, problem_text: str | None = None, target: str | None = None
) -> web.Response:
    state: Console = request.app[CONSOLE]
    if not request[LOGIN]:
        raise web.HTTPSeeOther("/")
    target = target or request.query.get("next", "/")
    content = join(
        [
            message(problem_text) if problem_text else "",
            tag(
                "p",
                "This broker has SASL users: log in as one (its SCRAM password).",
                class_="muted",
            ),
            user_password("current-password", autocomplete="username", autofocus=True),
            hidden("next", target),
        ]
    )
    box = tag(
        "div",
        form("/login", content, "Log in", csrf=session(request).csrf, class_="stacked", id="login"),
        class_="login",
    )
    del state
    return web.Response(
        text=layout("Log in", box, None, csrf=session(request).csrf),
        content_type="text/html",
        status=401 if problem_text else 200,
    )


async def login(request: web.Request) -> web.StreamResponse:
    state: Console = request.app[CONSOLE]
    data = await posted(request)
    target = data.get("next", "/")
    if not state.access.csrf_ok(session(request), data.get("csrf")):
        return await login_page(request, "this form has no valid CSRF token: try again", target)
    user, password = data.get("user", ""), data.get("password", "")
    if not await state.access.check_password(user, password):
        log.warning("console: refused a login as %r from %s", user, request.remote)
        return await login_page(request, "wrong user or password", target)
    request[SESSION] = state.access.renew(session(request), user)
    raise web.HTTPSeeOther(
        target if target.startswith("/") and not target.startswith("//") else "/"
    )


async def logout(request: web.Request) -> web.StreamResponse:
    state: Console = request.app[CONSOLE]
    request[SESSION] = state.access.renew(session(request), None)
    raise web.HTTPSeeOther("/login" if request[LOGIN] else "/")


def static(text: str, content_type: str) -> Handler:
    async def serve(request: web.Request) -> web.Response:
        return web.Response(
            text=text, content_type=content_type, headers={"Cache-Control": "max-age=300"}
        )

    return serve


def build_app(state: Console) -> web.Application:
    """The application; the change endpoints are routed only in admin mode."""
    app = web.Application(middlewares=[errors, sessions], client_max_size=MAX_FORM_BYTES)
    app[CONSOLE] = state
    get = [
        ("/", overview.overview),
        ("/overview/health", overview.health_fragment),
        ("/topics", topics.topic_list),
        ("/topics/{topic}", topics.topic_page),
        ("/topics/{topic}/messages", messages.browse),
        ("/topics/{topic}/messages/{partition}/{offset}", messages.one_message),
        ("/topics/{topic}/export", messages.export),
        ("/topics/{topic}/tail", tail.tail_page),
        ("/topics/{topic}/tail/events", tail.tail_events),
        ("/groups", groups.group_list),
        ("/groups/{group}", groups.group_page),
        ("/groups/{group}/lag", groups.lag_fragment),
        ("/archive", archive.archive_page),
        ("/security", security.security_page),
        ("/login", login_page),
        ("/static/console.css", static(CSS, "text/css")),
        ("/static/console.js", static(JS, "application/javascript")),
    ]
    post: list[tuple[str, Handler]] = [("/login", login), ("/logout", logout)]
    if state.admin:
        get.append(("/groups/{group}/reset", groups.reset_preview))
        post += [
            ("/topics", topics.create_topic),
            ("/topics/{topic}/config", topics.alter_topic),
            ("/topics/{topic}/delete", topics.delete_topic),
            ("/topics/{topic}/produce", messages.produce),
            ("/groups/{group}/reset", groups.reset_execute),
            ("/security/users", security.add_user),
            ("/security/users/delete", security.remove_user),
            ("/security/acls", security.add_acl),
            ("/security/acls/delete", security.remove_acl),
        ]
    for route, handler in get:
        app.router.add_get(route, handler, allow_head=False)
    for route, handler in post:
        app.router.add_post(route, handler)
    app.on_startup.append(_start_background)
    app.on_shutdown.append(_closing)
    app.on_cleanup.append(_stop_background)
    return app


SAMPLER_TASK = web.AppKey("sampler", asyncio.Task[None])


async def _start_background(app: web.Application) -> None:
    state = app[CONSOLE]
    if state.layer.notifier is not None:
        state.layer.notifier.start()
    app[SAMPLER_TASK] = asyncio.create_task(state.sampler.run(), name="console sampler")


async def _closing(app: web.Application) -> None:
    app[CONSOLE].closing.set()


async def _stop_background(app: web.Application) -> None:
    task = app[SAMPLER_TASK]
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    state = app[CONSOLE]
    if state.layer.notifier is not None:
        await state.layer.notifier.stop()


def make_console(
    log_: Log,
    admin: bool = False,
    super_users: tuple[str, ...] = (),
    archive_: Archive | None = None,
    sample_seconds: float | None = None,
    spark_exports: tuple[str, ...] = (),
) -> Console:
    """The console over ``log_`` (tiered over ``archive_``, if given); ``spark_exports``:
    the output directories of Parquet exports whose coverage the Archive page shows."""
    coordinator = GroupCoordinator(log_)
    layer = Partitions(log_, log_.stores.notifier(log_.channel("")))
    sampler = Sampler(log_, coordinator)
    if sample_seconds is not None:
        sampler.interval = sample_seconds
    if archive_ is not None:
        from storage_pg.cold import status

        async def archived_rows() -> int:
            return sum(p.records for p in (await status(await archive_.pool())).partitions)

        sampler.archived_rows = archived_rows
    access = Access(log_, super_users)
    return Console(log_, layer, coordinator, access, sampler, admin, archive_, spark_exports)


async def serve_console(
    state: Console,
    host: str,
    port: int,
    stop: asyncio.Event | None = None,
    started: Callable[[str], None] | None = None,
    beside_broker: bool = False,
) -> None:
    """Serve the console on host:port until ``stop`` is set (or cancelled); ``started``
    is told its address once it listens. An address it cannot listen on raises OSError,
    but ``beside_broker`` (serve --console), where it is logged: the broker goes on."""
    runner = web.AppRunner(build_app(state), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, shutdown_timeout=SHUTDOWN_SECONDS)
        try:
            await site.start()
        except OSError as exc:
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            why = f"cannot listen on {host}:{port}: {reason}"
            if not beside_broker:
                raise OSError(exc.errno, why) from None
            log.error("console: %s", why)  # the broker goes on without its console
            return
        bound = runner.addresses[0] if runner.addresses else (host, port)
        shown = f"[{bound[0]}]" if ":" in str(bound[0]) else str(bound[0])
        address = f"http://{shown}:{bound[1]}/"
        log.info("console on %s (%s)", address, "admin" if state.admin else "read-only")
        if started is not None:
            started(address)
        await (stop.wait() if stop is not None else asyncio.Event().wait())
    finally:
        await runner.cleanup()


def archive_of(log_: Log) -> Archive | None:
    """The archive the log is tiered over, if any (the Archive page reads its tables)."""
    from storage_pg.tiered import Archive

    return log_.cold if isinstance(log_.cold, Archive) else None


def announce(address: str) -> None:
    """The console's address on stdout (scripts read it), flushed at once."""
    print(f"console: {address}", flush=True)
