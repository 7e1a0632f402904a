"""Transactions from the command line: transactions list, transactions describe ID
(Kafka's kafka-transactions.sh list / describe)."""

from __future__ import annotations

import datetime

import click

from kafkaesque.cli.base import Context, echo_table, main, pass_context, run_async
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
@pass_context
@run_async
async def list_transactions(
    ctx: Context, states: tuple[str, ...], producer_ids: tuple[int, ...], duration_ms: int
) -> None:
    """List transactional ids: producer id, epoch and state."""
    listing = await coordinator(ctx).listing(states, producer_ids, duration_ms)
    rows = [
        [t.transactional_id, str(t.producer_id), str(t.producer_epoch), str(t.state)]
        for t in listing.transactions
    ]
    if rows:
        echo_table(["TRANSACTIONAL ID", "PRODUCER ID", "EPOCH", "STATE"], rows)
    else:  # on stderr: stdout stays a table, empty
        click.echo("no transactional ids", err=True)


@transactions.command("describe")
@click.argument("transactional_id")
@pass_context
@run_async
async def describe_transaction(ctx: Context, transactional_id: str) -> None:
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
    echo_table(["FIELD", "VALUE"], rows)
