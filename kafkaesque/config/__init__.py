"""Configuration, declared once and with no I/O: every topic config (``topic_keys``,
``topic_config``), every group config (``group_keys``) and every broker setting
(``broker_settings``: the serve options, --config and DescribeConfigs). Imports only the
shared modules of ``kafkaesque``."""
