"""The fuzz tests run against the wire tests' broker process (one per module); Hypothesis
keeps its files (example database, caches) in a temporary directory, not in the working
directory's .hypothesis."""

import atexit
import os
import shutil
import tempfile

from tests.wire.conftest import broker, broker_factory, module_broker

__all__ = ["broker", "broker_factory", "module_broker"]

_HOME = tempfile.mkdtemp(prefix="kafkaesque-hypothesis-")
os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = _HOME  # read when Hypothesis first writes
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
