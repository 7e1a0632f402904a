"""Writes wire/protocol/kio_types.py: the type aliases of kio's classes of every API the
broker offers, at the versions it offers (the ranges of wire/handlers/__init__.py
``HANDLERS``), that the handlers are typed with.

One alias per API and direction (``CreateTopicsRequest``, ``CreateTopicsResponse``: the
union of that class over the versions offered), plus the entries of ``EXTRA``: the
entity classes handlers name, and the narrowed unions of the versions that carry a field
the others lack, which handlers narrow to on the body's ``__version__``. Everything is
under ``TYPE_CHECKING``: importing every kio version at run time costs seconds.

    .venv/bin/python scripts/gen_kio_types.py          # rewrite the file
    .venv/bin/python scripts/gen_kio_types.py --check  # exit 1 if it is not up to date

tests/test_kio_types.py checks the file is this script's output.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path
from typing import NamedTuple

import kio.schema
from kio.schema.index import api_key_map

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "wire" / "handlers" / "__init__.py"
OUTPUT = REPO / "wire" / "protocol" / "kio_types.py"
SCHEMA = Path(kio.schema.__file__).parent
LINE = 100  # ruff's line length: the output is already formatted as ruff formats it


class Extra(NamedTuple):
    """An alias beside the API's own: ``classes`` (each version's that define them) of
    the API's ``direction`` module, at versions ``since`` to ``until`` of those offered."""

    alias: str
    api: str
    direction: str  # "request" or "response"
    classes: tuple[str, ...]
    since: int | None = None
    until: int | None = None
    why: str = ""
    # The name of a function, generated too, that narrows the API's union (or the
    # widest alias holding this one) to this alias by the body's ``__version__``.
    check: str = ""


EXTRA = (
    Extra(
        "AddPartitionsToTxnRequestV3AndBelow",
        "add_partitions_to_txn",
        "request",
        ("AddPartitionsToTxnRequest",),
        until=3,
        why="v0-3: one producer's partitions",
    ),
    Extra(
        "AddPartitionsToTxnRequestBatched",
        "add_partitions_to_txn",
        "request",
        ("AddPartitionsToTxnRequest",),
        since=4,
        why="v4+: the brokers' batched form (KIP-890); before, one producer's partitions",
        check="adds_batched",
    ),
    Extra(
        "AddPartitionsToTxnTopic", "add_partitions_to_txn", "request", ("AddPartitionsToTxnTopic",)
    ),
    Extra(
        "AddPartitionsToTxnTopicResult",
        "add_partitions_to_txn",
        "response",
        ("AddPartitionsToTxnTopicResult",),
    ),
    Extra(
        "AddPartitionsToTxnPartitionResult",
        "add_partitions_to_txn",
        "response",
        ("AddPartitionsToTxnPartitionResult",),
    ),
    Extra("AlterClientQuotasEntry", "alter_client_quotas", "request", ("EntryData",)),
    Extra("AlterConfigsResource", "alter_configs", "request", ("AlterConfigsResource",)),
    Extra(
        "AlterConfigsResourceResponse",
        "alter_configs",
        "response",
        ("AlterConfigsResourceResponse",),
    ),
    Extra(
        "ScramCredentialUpsertion",
        "alter_user_scram_credentials",
        "request",
        ("ScramCredentialUpsertion",),
    ),
    Extra(
        "ScramCredentialChange",
        "alter_user_scram_credentials",
        "request",
        ("ScramCredentialDeletion", "ScramCredentialUpsertion"),
    ),
    Extra("ApiVersionEntry", "api_versions", "response", ("ApiVersion",)),
    Extra("CreatableTopic", "create_topics", "request", ("CreatableTopic",)),
    Extra("DeleteAclsFilter", "delete_acls", "request", ("DeleteAclsFilter",)),
    Extra("DeleteRecordsPartition", "delete_records", "request", ("DeleteRecordsPartition",)),
    Extra(
        "DeleteRecordsPartitionResult",
        "delete_records",
        "response",
        ("DeleteRecordsPartitionResult",),
    ),
    Extra(
        "DeleteTopicsRequestV6",
        "delete_topics",
        "request",
        ("DeleteTopicsRequest",),
        since=6,
        why="v6 may name a topic by its id",
        check="deletes_by_id",
    ),
    Extra("DeleteTopicState", "delete_topics", "request", ("DeleteTopicState",)),
    Extra("DescribeConfigsResource", "describe_configs", "request", ("DescribeConfigsResource",)),
    Extra("DescribableLogDirTopic", "describe_log_dirs", "request", ("DescribableLogDirTopic",)),
    Extra("DescribeLogDirsResult", "describe_log_dirs", "response", ("DescribeLogDirsResult",)),
    Extra("PartitionResponse", "describe_producers", "response", ("PartitionResponse",)),
    Extra("DescribeQuorumPartitionData", "describe_quorum", "response", ("PartitionData",)),
    Extra("DescribeQuorumNode", "describe_quorum", "response", ("Node",)),
    Extra(
        "DescribeTopicPartitionsResponseTopic",
        "describe_topic_partitions",
        "response",
        ("DescribeTopicPartitionsResponseTopic",),
    ),
    Extra("Cursor", "describe_topic_partitions", "response", ("Cursor",)),
    Extra(
        "ElectLeadersRequestV1Plus",
        "elect_leaders",
        "request",
        ("ElectLeadersRequest",),
        since=1,
        why="v1+ name the election type (KIP-460); v0 elects the preferred leader",
        check="chooses_election",
    ),
    Extra("FetchPartitionData", "fetch", "response", ("PartitionData",)),
    Extra(
        "FindCoordinatorRequestBatched",
        "find_coordinator",
        "request",
        ("FindCoordinatorRequest",),
        since=4,
        why="v4+ look up a list of keys (coordinator_keys, KIP-699); before, one (key)",
        check="finds_batched",
    ),
    Extra(
        "IncrementalAlterConfigsResource",
        "incremental_alter_configs",
        "request",
        ("AlterConfigsResource",),
    ),
    Extra(
        "IncrementalAlterConfigsResourceResponse",
        "incremental_alter_configs",
        "response",
        ("AlterConfigsResourceResponse",),
    ),
    Extra(
        "InitProducerIdRequestV3Plus",
        "init_producer_id",
        "request",
        ("InitProducerIdRequest",),
        since=3,
        why="v3+ may carry the producer's id and epoch (KIP-360)",
        check="names_producer",
    ),
    Extra(
        "LeaveGroupRequestV3Plus",
        "leave_group",
        "request",
        ("LeaveGroupRequest",),
        since=3,
        why="v3+ name the members leaving (a batch, KIP-345); before, the one member asking",
        check="names_members",
    ),
    Extra("ListOffsetsPartition", "list_offsets", "request", ("ListOffsetsPartition",)),
    Extra(
        "ListOffsetsPartitionResponse",
        "list_offsets",
        "response",
        ("ListOffsetsPartitionResponse",),
    ),
    Extra(
        "ListTransactionsRequestV1Plus",
        "list_transactions",
        "request",
        ("ListTransactionsRequest",),
        since=1,
        why="v1+ filter by how long a transaction has run",
        check="filters_duration",
    ),
    Extra(
        "ListTransactionsRequestV2",
        "list_transactions",
        "request",
        ("ListTransactionsRequest",),
        since=2,
        why="v2 filters by a transactional id pattern",
        check="filters_pattern",
    ),
    Extra(
        "MetadataRequestV4Plus",
        "metadata",
        "request",
        ("MetadataRequest",),
        since=4,
        why="v4+ say whether the topics asked for may be created; before, they always may",
        check="says_auto_create",
    ),
    Extra("MetadataRequestTopic", "metadata", "request", ("MetadataRequestTopic",)),
    Extra(
        "MetadataRequestTopicV12Plus",
        "metadata",
        "request",
        ("MetadataRequestTopic",),
        since=12,
        why="v12+ may name a topic by its id alone",
    ),
    Extra(
        "OffsetFetchRequestBatched",
        "offset_fetch",
        "request",
        ("OffsetFetchRequest",),
        since=8,
        why="v8+ ask for several groups' offsets at once; before, for one group's",
        check="fetches_groups",
    ),
    Extra(
        "OffsetFetchTopic",
        "offset_fetch",
        "request",
        ("OffsetFetchRequestTopic", "OffsetFetchRequestTopics"),
    ),
    Extra(
        "OffsetFetchResponseTopic",
        "offset_fetch",
        "response",
        ("OffsetFetchResponseTopic", "OffsetFetchResponseTopics"),
    ),
    Extra(
        "OffsetForLeaderPartition",
        "offset_for_leader_epoch",
        "request",
        ("OffsetForLeaderPartition",),
    ),
    Extra("EpochEndOffset", "offset_for_leader_epoch", "response", ("EpochEndOffset",)),
    Extra(
        "TxnOffsetCommitRequestV3Plus",
        "txn_offset_commit",
        "request",
        ("TxnOffsetCommitRequest",),
        since=3,
        why="v3+ name the group member committing (KIP-447), for the group's fencing checks",
        check="names_member",
    ),
    Extra(
        "TxnOffsetCommitPartition",
        "txn_offset_commit",
        "request",
        ("TxnOffsetCommitRequestPartition",),
    ),
    Extra(
        "TxnOffsetCommitPartitionV2Plus",
        "txn_offset_commit",
        "request",
        ("TxnOffsetCommitRequestPartition",),
        since=2,
        why="v2+ carry the committed offset's leader epoch",
        check="has_leader_epoch",
    ),
)


def offered_ranges() -> dict[int, tuple[int, int]]:
    """api key -> (min version, max version) of the ``HANDLERS`` table, read from its
    source: importing the handlers would need this script's output to exist already."""
    for node in ast.parse(TABLE.read_text()).body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "HANDLERS"
            and isinstance(node.value, ast.Dict)
        ):
            ranges = {}
            for key, api in zip(node.value.keys, node.value.values, strict=True):
                assert isinstance(key, ast.Constant) and isinstance(api, ast.Call), key
                low, high = (ast.literal_eval(arg) for arg in api.args[:2])
                ranges[ast.literal_eval(key)] = (low, high)
            return ranges
    raise SystemExit(f"no HANDLERS table in {TABLE}")


@cache
def _classes(api: str, version: int, direction: str) -> dict[str, str]:
    """The classes a kio schema module defines -> their ``__type__`` (``request``,
    ``response``, ``nested``...), read from its source: importing it costs time."""
    tree = ast.parse((SCHEMA / api / f"v{version}" / f"{direction}.py").read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found[node.name] = ""
            for item in node.body:
                if (
                    isinstance(item, ast.AnnAssign)
                    and isinstance(item.target, ast.Name)
                    and item.target.id == "__type__"
                    and isinstance(item.value, ast.Attribute)
                ):
                    found[node.name] = item.value.attr
    return found


def _payload_class(api: str, version: int, direction: str) -> str:
    (name,) = (n for n, kind in _classes(api, version, direction).items() if kind == direction)
    return name


def _alias(name: str, members: list[str]) -> list[str]:
    """``name: TypeAlias = a | b`` laid out as ruff formats it."""
    joined = " | ".join(members)
    if len(f"    {name}: TypeAlias = {joined}") <= LINE:
        return [f"    {name}: TypeAlias = {joined}"]
    if len(f"        {joined}") <= LINE:
        return [f"    {name}: TypeAlias = (", f"        {joined}", "    )"]
    lines = [f"    {name}: TypeAlias = (", f"        {members[0]}"]
    lines += [f"        | {m}" for m in members[1:]]
    return [*lines, "    )"]


def _composed(entries: list[tuple[str, list[str], str]]) -> list[str]:
    """The aliases of one API, narrower first; a union that holds all of a narrower one's
    classes names it instead (``MetadataRequest = v0 | ... | v3 | MetadataRequestV4Plus``)."""
    lines: list[str] = []
    done: list[tuple[str, set[str]]] = []
    for alias, members, why in sorted(entries, key=lambda entry: len(entry[1])):
        remaining = list(members)
        for name, classes in sorted(done, key=lambda d: -len(d[1])):
            if classes < set(remaining):
                at = remaining.index(next(m for m in remaining if m in classes))
                remaining = [m for m in remaining if m not in classes]
                remaining.insert(at, name)
        done.append((alias, set(members)))
        if why:
            lines.append(f"    # {why}.")
        lines += _alias(alias, remaining)
    return lines


def _check(extra: Extra, wide: str) -> list[str]:
    """The function that narrows ``wide`` to ``extra.alias`` by the version."""
    name = "body" if extra.classes[0].endswith(("Request", "Response")) else "entry"
    if extra.until is None:
        test = f"{name}.__version__ >= {extra.since}"
    elif extra.since is None:
        test = f"{name}.__version__ <= {extra.until}"
    else:
        test = f"{extra.since} <= {name}.__version__ <= {extra.until}"
    head = f"def {extra.check}({name}: {wide}) -> TypeIs[{extra.alias}]:"
    if len(head) > LINE:
        head = f"def {extra.check}(\n    {name}: {wide},\n) -> TypeIs[{extra.alias}]:"
    return ["", "", head, f'    """{extra.why}."""', f"    return {test}"]


def _qualified(api: str, version: int, direction: str, cls: str) -> str:
    return f"kio.schema.{api}.v{version}.{direction}.{cls}"


def render() -> str:
    """The text of wire/protocol/kio_types.py."""
    # The versions offered that kio defines (Produce is offered from v0, kio parses v3+).
    offered = {
        api_key_map[key]: (
            key,
            [v for v in range(low, high + 1) if (SCHEMA / api_key_map[key] / f"v{v}").is_dir()],
        )
        for key, (low, high) in offered_ranges().items()
    }
    extras: dict[str, list[Extra]] = {}
    for extra in EXTRA:
        extras.setdefault(extra.api, []).append(extra)
    unknown = set(extras) - set(offered)
    if unknown:
        raise SystemExit(f"EXTRA names APIs the broker does not offer: {sorted(unknown)}")
    modules: set[tuple[str, int, str]] = set()
    body: list[str] = []
    checks: list[str] = []
    for api in sorted(offered):
        key, versions = offered[api]
        span = f"v{versions[0]}" + (f"-{versions[-1]}" if len(versions) > 1 else "")
        body += ["", f"    # {api} (api key {key}), {span}"]
        # (alias, its classes, why): the API's own request and response, then EXTRA's.
        entries: list[tuple[str, list[str], str]] = []
        for direction in ("request", "response"):
            members = [
                _qualified(api, v, direction, _payload_class(api, v, direction)) for v in versions
            ]
            entries.append((_payload_class(api, versions[-1], direction), members, ""))
            modules.update((api, v, direction) for v in versions)
        for extra in extras.get(api, []):
            lo = versions[0] if extra.since is None else extra.since
            hi = versions[-1] if extra.until is None else extra.until
            members = [
                _qualified(api, v, extra.direction, cls)
                for v in versions
                if lo <= v <= hi
                for cls in extra.classes
                if cls in _classes(api, v, extra.direction)
            ]
            if not members:
                raise SystemExit(f"{extra.alias}: no version offered defines {extra.classes}")
            entries.append((extra.alias, members, extra.why))
        body += _composed(entries)
        for extra in extras.get(api, []):
            if extra.check:
                classes = {alias: set(members) for alias, members, _ in entries}
                narrow = classes[extra.alias]
                wide = max(
                    (a for a in classes if classes[a] > narrow), key=lambda a: len(classes[a])
                )
                checks += _check(extra, wide)
    imports = [f"    import kio.schema.{a}.v{v}.{d}" for a, v, d in sorted(modules)]
    imports.append("    from typing_extensions import TypeIs")
    head = [
        '"""The kio classes of every API the broker offers, at the versions it offers',
        "(wire/handlers/__init__.py HANDLERS), for the type checker: handlers import them",
        "under ``TYPE_CHECKING``; importing every kio version at run time costs seconds, so",
        "no alias is defined at run time. The functions at the end narrow a union to the",
        "versions that carry a field the others lack, by the body's ``__version__``.",
        "",
        "Generated by scripts/gen_kio_types.py; do not edit, run it again when HANDLERS or its",
        "EXTRA table changes (tests/test_kio_types.py checks the file is up to date).",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import TYPE_CHECKING, TypeAlias",
        "",
        "if TYPE_CHECKING:",
    ]
    return "\n".join([*head, *imports, *body, *checks]) + "\n"


def main() -> int:
    text = render()
    if sys.argv[1:] == ["--check"]:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(REPO)} is not up to date: run {Path(__file__).name}")
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
