"""Transactions from the command line: transactions list, transactions describe ID
(Kafka's kafka-transactions.sh list / describe)."""

from __future__ import annotations

import datetime

import click

from kafkaesque.cli.base import Context, main, pass_context, run_async
from kafkaesque.cli.output import echo_document, echo_rows, format_option
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.partition.layer import Partitions
from kafkaesque.txn.coordinator import TransactionCoordinator
from kafkaesque.txn.transaction import TxnState


def coordinator(ctx: Context) -> TransactionCoordinator:
    log = ctx.log(archive=False)
    return TransactionCoordinator(log, Partitions(log), GroupCoordinator(log))


def started(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="seconds")


@main.group()
def transactions() -> None:
    """Transactional ids and their transactions (the transaction coordinator's state)."""


@transactions.command("list")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([str(s) for s in TxnState]),
    help="Only ids in this state (repeatable).",
)
@click.option(
    "--producer-id", "producer_ids", multiple=True, type=int, help="Only this producer id."
)
@click.option(
    "--duration-ms", type=int, default=-1, help="Only transactions open longer than this."
)
@format_option
@pass_context
@run_async
async def list_transactions(
    ctx: Context,
    states: tuple[str, ...],
    producer_ids: tuple[int, ...],
    duration_ms: int,
    output_format: str,
) -> None:
    """List transactional ids: producer id, epoch and state."""
    listing = await coordinator(ctx).listing(states, producer_ids, duration_ms)
    rows = [
        [t.transactional_id, t.producer_id, t.producer_epoch, str(t.state)]
        for t in listing.transactions
    ]
    headers = ["TRANSACTIONAL ID", "PRODUCER ID", "EPOCH", "STATE"]
    # on stderr: stdout stays a table, empty
    echo_rows(output_format, headers, rows, empty="no transactional ids")


@transactions.command("describe")
@click.argument("transactional_id")
@format_option
@pass_context
@run_async
async def describe_transaction(ctx: Context, transactional_id: str, output_format: str) -> None:
    """One transactional id: its producer, state, timeout and open transaction's partitions."""
    txn = await coordinator(ctx).describe(transactional_id)
    if txn is None:
        raise click.ClickException(f"no such transactional id: {transactional_id}")
    rows = [
        ["producer id", str(txn.producer_id)],
        ["epoch", str(txn.producer_epoch)],
        ["state", str(txn.state)],
        ["timeout ms", str(txn.timeout_ms)],
        ["started", started(txn.start_ms)],
        ["partitions", " ".join(f"{t}-{p}" for t, p in sorted(txn.partitions)) or "-"],
        ["groups", " ".join(sorted(txn.groups)) or "-"],
    ]
    document = {
        "transactional_id": transactional_id,
        "producer_id": txn.producer_id,
        "epoch": txn.producer_epoch,
        "state": str(txn.state),
        "timeout_ms": txn.timeout_ms,
        "started": None if txn.start_ms < 0 else started(txn.start_ms),
        "partitions": [{"topic": t, "partition": p} for t, p in sorted(txn.partitions)],
        "groups": sorted(txn.groups),
    }
    echo_document(
        output_format, document, lambda: echo_rows(output_format, ["FIELD", "VALUE"], rows)
    )
