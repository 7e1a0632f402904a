"""The fuzz tests run against the wire tests' broker process (one per module); Hypothesis
keeps its files in a temporary directory (see tests/conftest.py)."""

from tests.wire.conftest import broker, broker_factory, module_broker

__all__ = ["broker", "broker_factory", "module_broker"]
