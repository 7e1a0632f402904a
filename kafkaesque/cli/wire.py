"""The command line's wire mode: with ``-b/--bootstrap-server`` the commands that have a
wire form speak the Kafka protocol to a broker (kafkaesque's or Kafka's) instead of
reaching Redis. This module holds the options' checks and the settings; the client
itself (confluent-kafka, loaded only in wire mode) is ``kafkaesque.cli.wire_client``,
with its groups (``wire_groups``), users and ACLs (``wire_security``) and records
(``wire_records``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from kafkaesque.cli.wire_client import WireClient
    from kafkaesque.cli.wire_groups import WireGroups
    from kafkaesque.cli.wire_security import WireSecurity

# The commands that have a wire form; any other given with -b is a usage error.
WIRE_COMMANDS = frozenset(
    {
        "produce",
        "consume",
        "topics",
        "describe",
        "create",
        "delete",
        "alter",
        "delete-records",
        "groups",
        "group",
        "users",
        "acls",
    }
)

_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s:,\[\]]+):([0-9]{1,5})")


@dataclass(frozen=True)
class WireSettings:
    """Where the brokers are and the client properties (librdkafka's names)."""

    bootstrap: str
    properties: dict[str, str] = field(default_factory=dict)


def bootstrap_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """HOST:PORT[,HOST:PORT...], checked now (a typo is a usage error)."""
    if value is None:
        return None
    for item in value.split(","):
        found = _HOST_PORT.fullmatch(item.strip())
        if found is None or not 0 < int(found.group(2)) < 65536:
            raise click.BadParameter(f"expected HOST:PORT[,HOST:PORT...], got {value!r}")
    return ",".join(item.strip() for item in value.split(","))


def read_command_config(path: str) -> dict[str, str]:
    """Client properties, one ``key=value`` a line (librdkafka's names, as kcat's -F and
    the Kafka tools' --command-config); blank lines and ``#`` comments are skipped."""
    properties: dict[str, str] = {}
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(
            f"cannot read {path}: {exc}", param_hint="--command-config"
        ) from None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(
                f"{path} line {number}: expected key=value", param_hint="--command-config"
            )
        properties[key.strip()] = value.strip()
    properties.pop("bootstrap.servers", None)  # -b says where
    return properties


def wire_settings(
    bootstrap: str | None, command_config: str | None, command: str | None
) -> WireSettings | None:
    """The wire mode's settings (None: the direct mode); a usage error for a command with
    no wire form, or --command-config without -b."""
    if bootstrap is None:
        if command_config is not None:
            raise click.UsageError("--command-config goes with -b/--bootstrap-server")
        return None
    if command is not None and command not in WIRE_COMMANDS:
        raise click.UsageError(
            f"{command} has no wire form: it works on the store directly "
            "(drop -b/--bootstrap-server)"
        )
    properties = {} if command_config is None else read_command_config(command_config)
    return WireSettings(bootstrap, properties)


def no_wire_form(settings: WireSettings | None, **given: bool) -> None:
    """A usage error if, in wire mode, an option with no wire form was given (the keyword
    names the option: on_truncation -> --on-truncation)."""
    if settings is None:
        return
    for name, present in given.items():
        if present:
            option = "--" + name.replace("_", "-")
            raise click.UsageError(f"{option} has no wire form (drop it, or -b)")


def wire_client(settings: WireSettings, *, tolerate_down: bool = False) -> WireClient:
    """The client (confluent-kafka is loaded here, in wire mode only)."""
    from kafkaesque.cli.wire_client import WireClient

    return WireClient(settings, tolerate_down=tolerate_down)


def wire_groups(settings: WireSettings) -> WireGroups:
    """The group requests over a new client (confluent-kafka loaded here)."""
    from kafkaesque.cli.wire_groups import WireGroups

    return WireGroups(wire_client(settings))


def wire_security(settings: WireSettings) -> WireSecurity:
    """The user and ACL requests over a new client (confluent-kafka loaded here)."""
    from kafkaesque.cli.wire_security import WireSecurity

    return WireSecurity(wire_client(settings))
