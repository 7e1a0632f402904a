"""kafkaesque: a Kafka-compatible log service whose hot data lives in Redis."""

__version__ = "0.1.0"
