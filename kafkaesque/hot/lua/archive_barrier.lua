-- The archiver's barrier write (storage_pg/archiver.py): a counter in the partition's
-- meta, whose replication WAIT then covers every earlier write of the server. KEYS[1]
-- meta hash. Returns the counter, or 0 for a partition deleted meanwhile (a bare HINCRBY
-- would create a meta without the rest).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('HINCRBY', KEYS[1], 'archive_barrier', 1)
