"""`kafkaesque compact`: compact the closed pages of compact topics, for cron (a running
`kafkaesque serve` compacts every few seconds by itself)."""

from __future__ import annotations

import click

from kafkaesque.cli.base import Context, main, pass_context, run_async
from kafkaesque.cli.options import checked_topic
from kafkaesque.hot.compaction import Compactor


def topic_names(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[str]:
    return [checked_topic(value) for value in values]


@main.command()
@click.argument("topics", nargs=-1, callback=topic_names)
@click.option(
    "--force",
    is_flag=True,
    help="Compact even below min.cleanable.dirty.ratio (the compaction lags still hold, and "
    "with an archive only archived pages are compacted).",
)
@pass_context
@run_async
async def compact(ctx: Context, topics: list[str], force: bool) -> None:
    """Keep the latest record per key in the closed pages of TOPICS (default: every topic
    whose cleanup.policy has compact); prints one line per topic."""
    log = ctx.log()
    compactor = Compactor(log)
    done = await compactor.run_once(
        topics or None, force=force, progress=lambda line: click.echo(line, err=True)
    )
    for topic in done:
        click.echo(topic.format())
    if not done and not topics:
        click.echo("no topic has cleanup.policy compact", err=True)
