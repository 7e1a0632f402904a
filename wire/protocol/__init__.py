"""The Kafka protocol with no I/O: kio parsing and encoding (``codec``), the hand-written
parsers and encoders of the hot requests and responses, and the array-length guard.
Imports nothing from ``kafkaesque`` or the rest of ``wire``."""
