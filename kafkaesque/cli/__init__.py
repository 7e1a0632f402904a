"""The ``kafkaesque`` command line: the composition root that wires the parts together
(the only place that imports both ``wire`` and ``storage_pg``)."""

from kafkaesque.cli import archive, groups, records, serve, spark, topics  # noqa: F401  (register the commands)
from kafkaesque.cli.base import main

__all__ = ["main"]
