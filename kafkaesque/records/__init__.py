"""Kafka's RecordBatch v2, with no I/O: decoding and checking what clients send
(``batch``, ``check``, ``body``), building and rewriting batches (``build``), the codecs
(``compression``) and the key partitioner (``partitioner``). Imports only the shared
modules of ``kafkaesque``."""
