-- Raise a slot's sequence counter to at least ARGV[1] (a restore, the archiver's tick).
-- KEYS[1] the slot's hash
raise_sequence(KEYS[1], tonumber(ARGV[1]))
return tonumber(redis.call('HGET', KEYS[1], 'seq') or 0)
