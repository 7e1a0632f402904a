"""The Kafka wire-protocol front end (asyncio), over the ``kafkaesque`` core.

``net`` accepts connections and frames requests (TLS, SASL, budgets, deadlines);
``protocol`` parses and encodes, with no I/O; ``handlers`` answers each API (handlers
never import each other); ``fetch`` keeps fetch sessions and the last answers; ``broker``
holds what handlers share, ``errors`` maps core exceptions to Kafka codes; ``topics``,
``topic_configs`` and ``group_answers`` hold what several handlers answer alike. Depends
on ``kafkaesque``, never on ``storage_pg``."""
