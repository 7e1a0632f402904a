"""Prometheus metrics of the front end: requests and latency per API, bytes, connections,
the request budget."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

from kio.schema.index import api_key_map
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kafkaesque.groups.share.fetch import ShareFetcher
from kafkaesque.hot.memory import MemoryUse
from wire.fetch.sessions import FetchSessionCache


def api_name(api_key: int) -> str:
    return api_key_map.get(api_key, str(api_key))


class Metrics:
    def watch_memory(self, use: Callable[[], MemoryUse]) -> None:
        """Redis memory (as the broker last read it) and its headroom, as gauges."""
        for name, what, value in (
            ("used_bytes", "Redis used_memory", lambda: use().used),
            ("max_bytes", "Redis maxmemory (0: none)", lambda: use().limit),
            (
                "headroom_ratio",
                "1 - used/maxmemory (1 without maxmemory)",
                lambda: 1 - use().fraction,
            ),
        ):
            self._watch(f"kafkaesque_redis_memory_{name}", what, value)

    def watch_fetch_sessions(self, sessions: FetchSessionCache) -> None:
        """The broker's incremental fetch sessions (Kafka's NumIncrementalFetchSessions,
        NumIncrementalFetchPartitionsCached, IncrementalFetchSessionEvictionsPerSec)."""
        for name, what, value in (
            ("fetch_sessions", "Incremental fetch sessions cached", lambda: len(sessions)),
            (
                "fetch_session_partitions",
                "Partitions cached in incremental fetch sessions",
                lambda: sessions.partitions,
            ),
        ):
            self._watch(f"kafkaesque_{name}", what, value)
        self.registry.register(_FetchSessionCounters(sessions))

    def watch_share_groups(self, fetcher: ShareFetcher) -> None:
        """Share groups' records on this broker: acquired, redelivered, acknowledged by
        kind (accepted, released, rejected, gap, renewed), and the share sessions."""
        self.registry.register(_ShareCounters(fetcher))
        self._watch(
            "kafkaesque_share_sessions", "Share sessions open", lambda: len(fetcher.sessions)
        )

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        counter = partial(Counter, registry=self.registry)
        gauge = partial(Gauge, registry=self.registry)
        self.requests = counter("kafkaesque_requests", "Requests handled", ["api"])
        self.errors = counter(
            "kafkaesque_request_failures",
            "Requests that closed the connection (malformed, unsupported, failed)",
            ["reason"],
        )
        self.latency = Histogram(
            "kafkaesque_request_seconds",
            "Time from a request's arrival to its response being queued",
            ["api"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )
        self.bytes_in = counter("kafkaesque_received_bytes", "Request bytes received")
        self.bytes_out = counter("kafkaesque_sent_bytes", "Response bytes sent")
        self.connections = gauge("kafkaesque_connections", "Open client connections")
        self.connections_total = counter(
            "kafkaesque_accepted_connections", "Client connections accepted"
        )
        self.refused_connections = counter(
            "kafkaesque_refused_connections",
            "Client connections closed at accept: --max-connections or --max-connections-per-ip",
            ["limit"],
        )
        self.queued_request_bytes = gauge(
            "kafkaesque_queued_request_bytes",
            "Bytes of requests being read or handled (see --queued-max-request-bytes)",
        )
        self.waiting_for_memory = gauge(
            "kafkaesque_connections_waiting_for_memory",
            "Connections whose next request waits for the request budget",
        )

    def _watch(self, name: str, what: str, value: Callable[[], float]) -> None:
        """A gauge that reads ``value()`` at each scrape."""
        Gauge(name, what, registry=self.registry).set_function(value)

    def serve(self, host: str, port: int) -> None:
        """Expose /metrics over HTTP from a background thread."""
        start_http_server(port, addr=host, registry=self.registry)


class _FetchSessionCounters(Collector):
    """The fetch session cache's own counts, as counters."""

    def __init__(self, sessions: FetchSessionCache) -> None:
        self.sessions = sessions

    def collect(self) -> Iterator[CounterMetricFamily]:
        for name, what, value in (
            (
                "incremental_fetches",
                "Incremental fetches answered within a fetch session",
                self.sessions.incremental_fetches,
            ),
            (
                "fetch_session_evictions",
                "Fetch sessions evicted for a new one",
                self.sessions.evictions,
            ),
            (
                "fetch_sessions_refused",
                "Fetch sessions not opened: no slot free (the fetch answered session 0)",
                self.sessions.refused,
            ),
        ):
            yield CounterMetricFamily(f"kafkaesque_{name}", what, value=value)


class _ShareCounters(Collector):
    """The share fetcher's counts of records, as one labelled counter."""

    def __init__(self, fetcher: ShareFetcher) -> None:
        self.fetcher = fetcher

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        family = CounterMetricFamily(
            "kafkaesque_share_records",
            "Share groups' records acquired, redelivered and acknowledged, by kind",
            labels=["kind"],
        )
        for kind, value in self.fetcher.counts.items():
            family.add_metric([kind], value)
        yield family
        in_flight = GaugeMetricFamily(
            "kafkaesque_share_in_flight_records",
            "Records of a share-partition acquired or waiting to be delivered again, as this "
            "broker's last share fetch of it saw them",
            labels=["group", "topic", "partition"],
        )
        archived = CounterMetricFamily(
            "kafkaesque_share_archived_records",
            "Offsets of a share-partition archived: rejected, past the delivery limit, or "
            "never acquired (aborted transactions' records, transaction markers)",
            labels=["group", "topic", "partition"],
        )
        for (group, topic, partition), (held, gone) in list(self.fetcher.in_flight.items()):
            labels = [group, topic, str(partition)]
            in_flight.add_metric(labels, held)
            archived.add_metric(labels, gone)
        yield in_flight
        yield archived
