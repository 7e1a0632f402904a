"""The hot store: everything kafkaesque keeps in Redis, and the only package that talks to it.

It owns the client and its three engines, chosen once from the URL (``connect``: one
server ``tier``, ``tier_cluster``, ``tier_sentinel``), every key (``keys``), the Lua
scripts (``lua/``, ``scripts``), and the stores built on them: the log (``log`` and its
parts: topics, appends, reads, leaders, producers' state, archiving, compaction, the high
watermark), groups' state and offsets (``group_store``, ``consumer_group_store``,
``group_offsets``), share groups and their share-partitions (``share_store``),
transactions' state and the offsets they hold pending (``txn_states``, ``txn_offsets``),
SCRAM credentials, the broker registry, notifications, memory and durability probes.
Redis Cluster's branches live here and nowhere else. It imports the shared modules,
``records``, ``config`` and the sans-IO models it stores (the group and transaction state
machines, SCRAM credentials); never the coordinators' I/O."""
