"""The partition layer every front end calls, Kafka's ReplicaManager: validated appends
(``appends``, composed in ``layer``), budgeted reads with one long poll (``reads``,
``read_types``, ``fetch_changed``), leaders and replicas over the live brokers
(``leadership``, ``replicas``) and topic ids. Imports ``hot``, ``records``, ``config``
and the shared modules."""
