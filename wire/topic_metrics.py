"""Per-topic and per-group figures for Prometheus: records and bytes in and out per topic
(Kafka's BrokerTopicMetrics), consumer lag per group and partition, how far the archive
is behind Redis per topic, and its watermark.

Traffic is counted by the partition layer (kafkaesque/partition/layer.py ``TopicTraffic``)
and turned into counters only when scraped. Lag needs Redis, which a scrape (in the metrics
server's thread) cannot ask: ``Lag.run`` computes it every few seconds, on the broker's
clock, while the metrics are served.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kafkaesque.errors import UnknownTopic
from kafkaesque.hot.outage import background_step
from kafkaesque.partition.layer import TopicTraffic
from wire.broker import Broker

log = logging.getLogger(__name__)

LAG_INTERVAL = 5.0  # seconds between two lag computations


class TrafficCounters(Collector):
    """The partition layer's ``TopicTraffic`` as Prometheus counters, read when scraped."""

    def __init__(self, traffic: TopicTraffic) -> None:
        self.traffic = traffic

    def collect(self) -> Iterator[CounterMetricFamily]:
        traffic = self.traffic
        for direction, table, verb in (
            ("in", traffic.written, "appended"),
            ("out", traffic.read, "fetched"),
        ):
            records = CounterMetricFamily(
                f"kafkaesque_topic_records_{direction}", f"Records {verb}", labels=["topic"]
            )
            size = CounterMetricFamily(
                f"kafkaesque_topic_bytes_{direction}", f"Batch bytes {verb}", labels=["topic"]
            )
            for topic, (n, b) in list(table.items()):  # one copy under the GIL
                records.add_metric([topic], n)
                size.add_metric([topic], b)
            yield records
            yield size


class Lag(Collector):
    """Consumer lag (log end - committed offset) per group and partition, and records in
    Redis the archive has not taken yet per topic, as last computed by ``refresh``."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.consumers: dict[tuple[str, str, int], int] = {}  # (group, topic, p) -> lag
        self.archive: dict[str, int] = {}  # topic -> records not archived
        self.watermark: int | None = None  # the archive's (None: no archive)

    async def refresh(self) -> None:
        log_ = self.broker.log
        topics: dict[str, int] = {}
        for name in await log_.list_topics():
            try:
                topics[name] = (await log_.topic(name)).partitions
            except UnknownTopic:
                continue
        ends = {t: await log_.log_ends(t, range(n)) for t, n in topics.items()}
        consumers: dict[tuple[str, str, int], int] = {}
        admin = self.broker.groups.admin
        for group in await admin.list_groups():
            for (topic, partition), committed in (await admin.committed(group)).items():
                if topic in ends and partition < len(ends[topic]):
                    lag = max(0, ends[topic][partition] - committed.offset)
                    consumers[group, topic, partition] = lag
        archive: dict[str, int] = {}
        watermark = None
        if log_.cold is not None:  # archiving: Redis' marks of what the archive holds
            watermark = await log_.cold.watermark()
            for topic, partition_ends in ends.items():
                marks = await log_.archived_ends(topic, range(len(partition_ends)))
                archive[topic] = sum(
                    max(0, end - mark) for end, mark in zip(partition_ends, marks, strict=True)
                )
        self.consumers, self.archive, self.watermark = consumers, archive, watermark

    async def run(self) -> None:
        """Refresh every LAG_INTERVAL seconds until cancelled; Redis away is retried."""
        while True:
            with background_step("computing consumer lag", log):
                await self.refresh()
            await self.broker.clock.sleep(LAG_INTERVAL)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        per_partition = GaugeMetricFamily(
            "kafkaesque_consumer_lag",
            "Records between a group's committed offset and the log end",
            labels=["group", "topic", "partition"],
        )
        per_group = GaugeMetricFamily(
            "kafkaesque_consumer_group_lag",
            "A group's lag over all its partitions",
            labels=["group"],
        )
        totals: dict[str, int] = {}
        for (group, topic, partition), lag in list(self.consumers.items()):
            per_partition.add_metric([group, topic, str(partition)], lag)
            totals[group] = totals.get(group, 0) + lag
        for group, lag in totals.items():
            per_group.add_metric([group], lag)
        archive = GaugeMetricFamily(
            "kafkaesque_archive_lag_records",
            "Records in Redis the archive has not taken yet (as Redis last heard)",
            labels=["topic"],
        )
        for topic, behind in list(self.archive.items()):
            archive.add_metric([topic], behind)
        yield per_partition
        yield per_group
        yield archive
        if self.watermark is not None:
            yield GaugeMetricFamily(
                "kafkaesque_archive_watermark",
                "Every record id up to this one is archived",
                value=self.watermark,
            )
