"""The share groups' configs: the broker's group.share.* and a group's own share.*
(Kafka 4.2's GroupConfig, kafkaesque/config/group_keys.py), as the coordinator and the
share fetches apply them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from kafkaesque.groups.consumer_state import session_defaults


@dataclass(slots=True)
class ShareGroupConfig:
    """The broker's defaults (``serve --config group.share....``) and, through
    ``for_group``, one group's values."""

    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    record_lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    max_record_locks: int = 2_000  # group.share.partition.max.record.locks
    max_size: int = 200  # group.share.max.size: members of one share group at most
    auto_offset_reset: str = "latest"  # share.auto.offset.reset (group config only)
    isolation_level: str = "read_uncommitted"  # share.isolation.level
    renew_acknowledge: bool = True  # share.renew.acknowledge.enable

    def group_defaults(self) -> dict[str, str]:
        """The group configs' broker defaults and bounds, as ``check_group_configs`` reads
        them; Kafka's bounds are widened to take in this broker's own defaults."""
        lock, limit, locks = (
            self.record_lock_duration_ms,
            self.delivery_count_limit,
            self.max_record_locks,
        )
        return {
            **session_defaults("share", self.session_timeout_ms, self.heartbeat_interval_ms),
            "share.record.lock.duration.ms": str(lock),
            "share.delivery.count.limit": str(limit),
            "share.partition.max.record.locks": str(locks),
            "group.share.min.record.lock.duration.ms": str(min(15_000, lock)),
            "group.share.max.record.lock.duration.ms": str(max(60_000, lock)),
            "group.share.min.delivery.count.limit": str(min(2, limit)),
            "group.share.max.delivery.count.limit": str(max(10, limit)),
            "group.share.min.partition.max.record.locks": str(min(100, locks)),
            "group.share.max.partition.max.record.locks": str(max(10_000, locks)),
        }

    def for_group(self, configs: Mapping[str, str]) -> ShareGroupConfig:
        """This config with the group's own share.* configs, where set."""

        def number(name: str, value: int) -> int:
            return int(configs.get(name, value))

        return replace(
            self,
            session_timeout_ms=number("share.session.timeout.ms", self.session_timeout_ms),
            heartbeat_interval_ms=number("share.heartbeat.interval.ms", self.heartbeat_interval_ms),
            record_lock_duration_ms=number(
                "share.record.lock.duration.ms", self.record_lock_duration_ms
            ),
            delivery_count_limit=number("share.delivery.count.limit", self.delivery_count_limit),
            max_record_locks=number("share.partition.max.record.locks", self.max_record_locks),
            auto_offset_reset=configs.get("share.auto.offset.reset", self.auto_offset_reset),
            isolation_level=configs.get("share.isolation.level", self.isolation_level),
            renew_acknowledge=configs.get("share.renew.acknowledge.enable", "true") == "true",
        )
