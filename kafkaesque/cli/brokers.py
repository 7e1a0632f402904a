"""The brokers sharing the Redis: `kafkaesque brokers` (Kafka's kafka-broker-api-versions /
kafka-metadata-quorum describe, for what this cluster has)."""

from __future__ import annotations

from collections import Counter

import click

from kafkaesque.cli.base import Context, main, pass_context, run_async
from kafkaesque.cli.output import echo_document, echo_rows, format_option
from kafkaesque.hot.registry import registered
from kafkaesque.tables import json_rows


@main.command()
@format_option
@pass_context
@run_async
async def brokers(ctx: Context, output_format: str) -> None:
    """The cluster id and the live brokers: node id, endpoints, session time left,
    partitions led."""
    log = ctx.log(archive=False)
    cluster = await log.stores.cluster_id()
    live = await registered(log)
    configs = await log.topic_configs() if live else []
    partitions = [(config.name, p) for config in configs for p in range(config.partitions)]
    leaders = await log.leaders(partitions) if partitions else []
    led = Counter(entry[0] for entry in leaders if entry is not None)
    headers = ["NODE", "ENDPOINTS", "SESSION LEFT S", "LEADS"]
    rows = [
        [
            info.node_id,
            " ".join(f"{n}://{h}:{p}" for n, (h, p) in sorted(info.endpoints.items())),
            round(left, 1),
            led[str(info.node_id)],
        ]
        for info, left in live
    ]

    def text() -> None:
        click.echo(f"cluster id  {cluster}")
        # on stderr: stdout stays the cluster id and a table, empty
        echo_rows(output_format, headers, rows, empty="no broker is running")

    echo_document(output_format, {"cluster_id": cluster, "brokers": json_rows(headers, rows)}, text)
