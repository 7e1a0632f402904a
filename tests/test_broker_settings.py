"""The broker's configs, declared once (kafkaesque/config/broker_settings.py): BrokerConfig's
defaults are the table's, every setting with an option is one of `serve`'s, and
DescribeConfigs lists them all."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kafkaesque.cli import main
from kafkaesque.config.broker_settings import BY_NAME, SETTINGS, WITH_OPTIONS, BrokerSetting
from kafkaesque.errors import InvalidConfig
from wire.broker import BrokerConfig


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_the_config_starts_at_the_tables_default(setting: BrokerSetting) -> None:
    if setting.default is not None or setting.option is not None:
        assert BrokerConfig().get(setting.attribute) == setting.default


def test_serve_has_an_option_for_each_and_describe_lists_all() -> None:
    shown = " ".join(CliRunner().invoke(main, ["serve", "--help"]).output.split())
    for setting in WITH_OPTIONS:
        assert setting.option is not None
        assert setting.option.split("/")[0] in shown, setting.name
        assert f"Kafka's {setting.name}" in shown
    described = {name for name, *_ in BrokerConfig().describe()}
    assert set(BY_NAME) <= described


def test_config_values_are_parsed_by_the_table() -> None:
    config = BrokerConfig()
    config.apply({"group.min.session.timeout.ms": "7000", "auto.create.topics.enable": "false"})
    assert config.groups.min_session_timeout_ms == 7000
    assert config.auto_create_topics is False
    with pytest.raises(InvalidConfig, match="below 1"):
        BrokerConfig().apply({"num.partitions": "0"})
    with pytest.raises(InvalidConfig, match="not true or false"):
        BrokerConfig().apply({"auto.create.topics.enable": "yes"})
    with pytest.raises(InvalidConfig, match="unknown broker config"):
        BrokerConfig().apply({"no.such.config": "1"})
