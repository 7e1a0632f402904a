"""kafkaesque: a Kafka-compatible log service whose hot data lives in Redis.

The packages, from the bottom up (each may import those above it, never those below):
the shared modules here (``errors``, ``clock``, ``tasks``, ``tables``, ``log_throttle``);
``records`` (Kafka's batch format); ``config`` (topic, group and broker configs); ``hot``
(the hot store: every Redis client, key and script); ``security``, ``groups``, ``txn``
(the coordinators) and ``partition`` (the layer the front ends call); ``cli`` (the
composition root). docs/architecture.md draws the map; tests/test_imports.py keeps it.
"""

__version__ = "0.1.0"
