"""`kafkaesque serve`: the Kafka wire-protocol broker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from kafkaesque.cli.base import Context, key_values, main, one_line_errors, pass_context
from kafkaesque.cli.options import choice_option, number_option
from kafkaesque.config.broker_settings import WITH_OPTIONS, serve_options
from kafkaesque.errors import KafkaesqueError
from kafkaesque.hot.connect import DEFAULT_MAX_CONNECTIONS
from kafkaesque.hot.embedded import EmbeddedError, EmbeddedRedis, server_name, serving
from kafkaesque.hot.outage import REDIS

if TYPE_CHECKING:
    from kafkaesque.hot.log import Log
    from wire.broker import BrokerConfig


def host_port(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[str, int] | None:
    """Parse HOST:PORT (IPv6 hosts in brackets)."""
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def loopback_port(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[str, int] | None:
    """HOST:PORT; a bare PORT listens on loopback."""
    if value is not None and value.isdigit():
        value = f"127.0.0.1:{value}"
    return host_port(ctx, param, value)


def metrics_address(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[str, int] | None:
    """[HOST:]PORT for the metrics endpoint: loopback unless a host is given."""
    address = loopback_port(ctx, param, value)
    if address is not None and value is not None and value.startswith(":"):
        return "127.0.0.1", address[1]
    return address


def listeners_option(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> list[tuple[str, str, int]]:
    """Repeated [PROTOCOL://]HOST:PORT: (protocol, host, port), one listener per protocol."""
    from wire.net.security import parse_listener

    found: list[tuple[str, str, int]] = []
    for text in value:
        try:
            protocol, host, port = parse_listener(text)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        if any(protocol == other for other, _, _ in found):
            raise click.BadParameter(f"two {protocol} listeners: one per security protocol")
        found.append((protocol, host or "0.0.0.0", port))
    return found


@main.command()
@click.option(
    "--listen",
    envvar="KAFKAESQUE_LISTEN",
    multiple=True,
    default=["127.0.0.1:9092"],
    show_default=True,
    callback=listeners_option,
    help="A listener, [PROTOCOL://]HOST:PORT (repeatable; env KAFKAESQUE_LISTEN): "
    "PLAINTEXT (the default), SSL, SASL_PLAINTEXT or SASL_SSL.",
)
@click.option(
    "--advertised-host",
    help="Host given to clients in metadata. Default: the listen host, or 127.0.0.1 "
    "when listening on all interfaces.",
)
@click.option(
    "--advertised-listener",
    "advertised_listeners",
    multiple=True,
    callback=listeners_option,
    help="PROTOCOL://HOST:PORT given in metadata to clients of that listener (repeatable). "
    "Default: --advertised-host and the listener's port.",
)
@click.option("--tls-cert", type=click.Path(dir_okay=False), help="PEM certificate (chain).")
@click.option("--tls-key", type=click.Path(dir_okay=False), help="PEM private key of --tls-cert.")
@click.option(
    "--tls-ca",
    type=click.Path(dir_okay=False),
    help="PEM CA certificates: clients of SSL and SASL_SSL listeners must present a "
    "certificate signed by one (mutual TLS; on SSL the principal is its subject).",
)
@click.option(
    "--sasl-enabled-mechanisms",
    default="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    show_default=True,
    help="SASL mechanisms of SASL listeners, comma-separated.",
)
@click.option(
    "--node-id",
    type=click.IntRange(0, 2**31 - 1),
    envvar="KAFKAESQUE_NODE_ID",
    help="This broker's id among the brokers sharing the Redis (env KAFKAESQUE_NODE_ID). "
    "Default: 0, or the next free id from 1000 when another live broker has 0.",
)
@click.option(
    "--metrics",
    callback=metrics_address,
    envvar="KAFKAESQUE_METRICS",
    help="Serve Prometheus metrics on [HOST:]PORT (127.0.0.1 unless a host is given; env "
    "KAFKAESQUE_METRICS): per API, per topic, consumer lag, the archive's lag.",
)
@number_option(
    "--request-timeout-ms",
    30_000,
    "Close a connection that sent part of a request, then nothing for this long.",
    low=1,
)
@number_option(
    "--redis-max-connections",
    DEFAULT_MAX_CONNECTIONS,
    "Connections to Redis at most; requests beyond wait for a free one.",
    low=2,
    high=10_000,
)
@click.option(
    "--config",
    "settings",
    multiple=True,
    callback=key_values,
    help="A Kafka broker config (repeatable): broker settings (num.partitions, "
    "group.min.session.timeout.ms, ...) and every topic's defaults (log.retention.ms, "
    "log.cleanup.policy, ...). One that disagrees with an option given for the same "
    "setting is refused.",
)
@click.option(
    "--archive/--no-archive",
    default=True,
    show_default=True,
    help="Archive to PostgreSQL (the global --pg-dsn, else a private PostgreSQL under the "
    "data directory) and serve old offsets from it.",
)
@number_option("--archive-interval", 10.0, "Seconds between archiver passes.", low=0.1)
@number_option(
    "--compaction-interval",
    5.0,
    "Seconds between compaction passes over topics whose cleanup.policy has compact "
    "(0: none; then run `kafkaesque compact` from cron).",
)
@choice_option(
    "--authorizer",
    choices=["none", "acl"],
    help="Kafka's authorizer.class.name: acl checks every request against the ACLs "
    "(`kafkaesque acls`); none lets every client do everything.",
)
@click.option(
    "--super-user",
    "super_users",
    multiple=True,
    metavar="PRINCIPAL",
    help="A principal (User:NAME) every ACL check lets through (repeatable).",
)
@click.option(
    "--console",
    "console_address",
    callback=metrics_address,
    envvar="KAFKAESQUE_CONSOLE",
    metavar="[HOST:]PORT",
    help="Serve the web console on [HOST:]PORT beside the broker (127.0.0.1 unless a host "
    "is given; env KAFKAESQUE_CONSOLE): read-only unless --console-admin.",
)
@click.option(
    "--console-admin",
    is_flag=True,
    help="Let the console make changes (topics, produce, group offsets, users, ACLs).",
)
@serve_options
@pass_context
def serve(
    ctx: Context,
    listen: list[tuple[str, str, int]],
    advertised_host: str | None,
    advertised_listeners: list[tuple[str, str, int]],
    tls_cert: str | None,
    tls_key: str | None,
    tls_ca: str | None,
    sasl_enabled_mechanisms: str,
    node_id: int | None,
    metrics: tuple[str, int] | None,
    request_timeout_ms: int,
    redis_max_connections: int,
    settings: dict[str, str],
    archive: bool,
    archive_interval: float,
    compaction_interval: float,
    authorizer: str,
    super_users: tuple[str, ...],
    console_address: tuple[str, int] | None,
    console_admin: bool,
    **settings_options: Any,
) -> None:
    """Serve the Kafka protocol: unmodified Kafka clients produce and fetch here."""
    from wire.broker import BrokerConfig
    from wire.net.security import Listener, TlsFileError, tls_context
    from wire.net.server import Companion, run

    listeners = [Listener(*item) for item in listen]
    host, port = listeners[0].host, listeners[0].port
    if advertised_host is None:
        advertised_host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    advertised = {name: (h, p) for name, h, p in advertised_listeners}
    unknown = set(advertised) - {listener.name for listener in listeners}
    if unknown:
        raise click.BadParameter(
            f"no --listen for {', '.join(sorted(unknown))}", param_hint="'--advertised-listener'"
        )
    for listener in listeners:
        advertised.setdefault(listener.name, (advertised_host, listener.port))
    mechanisms = tuple(m.strip().upper() for m in sasl_enabled_mechanisms.split(",") if m.strip())
    known = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    if not mechanisms or set(mechanisms) - set(known):
        raise click.BadParameter(
            f"expected some of {', '.join(known)}", param_hint="'--sasl-enabled-mechanisms'"
        )
    tls = None
    if any(listener.tls for listener in listeners):
        if tls_cert is None or tls_key is None:
            raise click.UsageError("SSL and SASL_SSL listeners need --tls-cert and --tls-key")
        with one_line_errors():
            try:
                tls = tls_context(tls_cert, tls_key, tls_ca)
            except TlsFileError as exc:  # the option and the file, not just OpenSSL's reason
                raise click.ClickException(
                    f"cannot load --tls-{exc.which} {exc.path}: {exc.reason}"
                ) from None
    if logging.getLogger().level > logging.INFO:
        logging.getLogger().setLevel(logging.INFO)
    config = BrokerConfig(
        host=advertised_host,
        port=port,
        node_id=0 if node_id is None else node_id,
        assign_node_id=node_id is None,
        request_timeout_ms=request_timeout_ms,
        compaction_interval=compaction_interval,
        authorizer="" if authorizer == "none" else authorizer,
        super_users=super_users,
        advertised_listeners=advertised,
        sasl_mechanisms=mechanisms,
    )
    for setting in WITH_OPTIONS:  # the options kafkaesque/config/broker_settings.py generates
        config.set(setting.attribute, settings_options[setting.param])
    for principal in super_users:
        if ":" not in principal.strip(":"):
            raise click.BadParameter(
                f"expected TYPE:NAME (User:admin), got {principal!r}", param_hint="'--super-user'"
            )
    try:
        config.apply(settings)
    except KafkaesqueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--config'") from None
    _refuse_disagreements(settings, config)
    if config.heartbeat_interval_ms >= config.session_timeout_ms:
        raise click.BadParameter(
            "must be below --broker-session-timeout-ms (broker.session.timeout.ms)",
            param_hint="'--broker-heartbeat-interval-ms'",
        )

    store_stopped: list[EmbeddedRedis] = []

    async def serve_log() -> None:
        log = ctx.log(archive=False, max_connections=redis_max_connections)
        await log.stores.ping()  # a wrong --redis-url: the error alone, no "retrying"
        REDIS.retrying = True  # from now on Redis going away is an outage to wait out
        companions: list[Companion] = []
        if ctx.embedded_redis():
            companions.append(watch_store(ctx.embedded(), store_stopped))
            REDIS.stopped = ctx.embedded().gone
        if dsn is not None:
            tier = ctx.attach_archive(log, dsn)
            await tier.bind()  # a Redis and an archive of two clusters: refuse to start

            async def archive_forever(stop: asyncio.Event) -> None:
                # The broker compacts, unless told not to (then cron's `compact` does).
                archiver = await tier.archiver(
                    log, compact=False, replicas=max(0, config.min_insync_replicas - 1)
                )
                await archiver.run_forever(archive_interval, stop=stop)

            companions.append(archive_forever)
        # A failover (of a cluster's shard too): new leader epochs.
        if log.stores.follows_failovers:

            async def follow_failovers(stop: asyncio.Event) -> None:
                from kafkaesque.hot.failover import FailoverWatch

                await FailoverWatch(log).run(stop)

            companions.append(follow_failovers)
        if console_address is not None:
            companions.append(web_console(log, console_address, console_admin, super_users))
        try:
            await run(log, host, port, config, metrics, companions, listeners, tls)
        finally:
            await ctx.aclose()
            await log.stores.close()
        if store_stopped:
            raise EmbeddedError(
                f"the embedded {server_name()} of {store_stopped[0].home} was stopped "
                "(`kafkaesque stop --force`?): the broker stopped with it"
            )

    with one_line_errors(), contextlib.ExitStack() as using:
        if ctx.embedded_redis():  # `kafkaesque stop` refuses while this runs
            using.enter_context(serving(Path(ctx.home)))
        ctx.url()  # the embedded Valkey first: its errors are the likelier ones
        dsn = ctx.required_archive_dsn() if archive else None
        asyncio.run(serve_log())


# How often a broker on the embedded Valkey checks that it still runs.
STORE_CHECK_INTERVAL = 0.5


def watch_store(
    embedded: EmbeddedRedis, stopped: list[EmbeddedRedis]
) -> Callable[[asyncio.Event], Coroutine[Any, Any, None]]:
    """A companion of a broker on the embedded Valkey: once that server was stopped (its
    pid file and socket gone: ``kafkaesque stop --force``; nobody restarts it), the broker
    stops as on SIGTERM and ``stopped`` says why. A crashed server (both left) is an outage
    the broker waits out, as with any Redis: the next command starts it again."""

    async def watch(stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), STORE_CHECK_INTERVAL)
            if not stop.is_set() and embedded.gone():
                await asyncio.sleep(STORE_CHECK_INTERVAL)  # a restart in progress
                if embedded.gone():
                    stopped.append(embedded)
                    os.kill(os.getpid(), signal.SIGTERM)  # the broker's own shutdown
                    return

    return watch


def web_console(
    log: Log, address: tuple[str, int], admin: bool, super_users: tuple[str, ...]
) -> Callable[[asyncio.Event], Coroutine[Any, Any, None]]:
    """A companion serving the web console (kafkaesque/console/) on the broker's log."""

    async def run(stop: asyncio.Event) -> None:
        from kafkaesque.console.app import announce, archive_of, make_console, serve_console

        state = make_console(log, admin, super_users, archive_of(log))
        await serve_console(state, *address, stop=stop, started=announce, beside_broker=True)

    return run


def _refuse_disagreements(settings: dict[str, str], config: BrokerConfig) -> None:
    """A --config and an option given for the same setting that disagree: a usage error
    (which one was meant?), not one silently overriding the other."""
    click_context = click.get_current_context()
    for setting in WITH_OPTIONS:
        text = settings.get(setting.name)
        source = click_context.get_parameter_source(setting.param)
        if text is None or source not in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            continue
        given = click_context.params[setting.param]
        if config.get(setting.attribute) != given:
            option = setting.option.split("/")[0] if setting.option else setting.param
            raise click.UsageError(
                f"{option} {given} and --config {setting.name}={text} disagree: give one of them"
            )
