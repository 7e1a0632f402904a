"""The brokers sharing the Redis: `kafkaesque brokers` (Kafka's kafka-broker-api-versions /
kafka-metadata-quorum describe, for what this cluster has)."""

from __future__ import annotations

from collections import Counter

import click

from kafkaesque.cli.base import Context, echo_table, main, pass_context, run_async
from kafkaesque.hot.registry import registered


@main.command()
@pass_context
@run_async
async def brokers(ctx: Context) -> None:
    """The live brokers: node id, endpoints, session time left, partitions led."""
    log = ctx.log(archive=False)
    live = await registered(log)
    if not live:  # on stderr: stdout stays a table, empty
        click.echo("no broker is running", err=True)
        return
    configs = await log.topic_configs()
    partitions = [(config.name, p) for config in configs for p in range(config.partitions)]
    led = Counter(entry[0] for entry in await log.leaders(partitions) if entry is not None)
    rows = [
        [
            info.node_id,
            " ".join(f"{n}://{h}:{p}" for n, (h, p) in sorted(info.endpoints.items())),
            f"{left:.1f}",
            led[str(info.node_id)],
        ]
        for info, left in live
    ]
    echo_table(["NODE", "ENDPOINTS", "SESSION LEFT S", "LEADS"], rows)
