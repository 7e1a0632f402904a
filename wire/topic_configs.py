"""Topic configs as more than one API (and the broker's start) need them.

- ``SOURCE_CODES``: a config's source as DescribeConfigs and CreateTopics number it;
- ``dynamic_broker_configs``: the dynamic broker configs AlterConfigs keeps in Redis;
- ``topic_defaults``: every topic's defaults, this broker's ``--config`` under them;
- ``created_configs``: a new topic's configs, as CreateTopics v5+ answers them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkaesque.config.topic_config import Source, TopicConfig, describe, dynamic_defaults

if TYPE_CHECKING:  # wire/broker.py imports this module when it starts
    from wire.broker import Broker

# DescribeConfigs' config_source.
SOURCE_CODES: dict[Source, int] = {
    "topic": 1,
    "dynamic_broker": 2,
    "dynamic_default": 3,
    "broker": 4,
    "default": 5,
    "group": 8,
}


async def dynamic_broker_configs(
    broker: Broker,
) -> tuple[dict[str, str], dict[int, dict[str, str]]]:
    """The dynamic broker configs: the cluster-wide default's, and each broker's own."""
    return await broker.log.stores.broker_configs.read()


async def topic_defaults(broker: Broker) -> dict[str, str]:
    """Every topic's defaults: this broker's ``--config`` under the dynamic broker configs
    (for ``Log.set_topic_defaults``, at start and after each change)."""
    cluster, per_broker = await dynamic_broker_configs(broker)
    return dynamic_defaults(broker.config.topic_defaults, cluster, per_broker)


def created_configs(config: TopicConfig) -> list[tuple[str, str, int]]:
    """(name, value, source) of every config of a new topic, for CreateTopics v5+."""
    return [(e.name, e.value, SOURCE_CODES[e.source]) for e in describe(config)]
