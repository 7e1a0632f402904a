"""The ``kafkaesque`` command line: the composition root that wires the parts together
(the only place that imports both ``wire`` and ``storage_pg``)."""

from kafkaesque.cli import (  # noqa: F401  (register the commands)
    acls,
    archive,
    brokers,
    compact,
    console,
    groups,
    produce_consume,
    quotas,
    records,
    serve,
    servers,
    spark,
    topics,
    transactions,
    users,
)
from kafkaesque.cli.base import main

__all__ = ["main"]
