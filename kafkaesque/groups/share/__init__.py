"""Share groups (KIP-932, Kafka 4.2's queues): consumers of one share group read the same
partitions together; each record is acquired by one member for a lock duration and
acknowledged one by one (accept, release, reject), redelivered when its lock expires, up
to the delivery limit.

- ``state.py``: the group and its members (ShareGroupHeartbeat's rules), no I/O;
- ``assignor.py``: KIP-932's simple assignor;
- ``config.py``: the group configs (group.share.*) the coordinator and fetches apply;
- ``coordinator.py``: heartbeats, expiry, describe, listing, deletion, offsets admin;
- ``sessions.py``: share sessions (ShareFetch's, per broker process);
- ``fetch.py``: acquisition from the log and acknowledgements, through the share-partition
  state of kafkaesque/hot/share_store.py (its Lua scripts make each step atomic).
"""
