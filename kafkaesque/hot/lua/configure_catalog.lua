-- A topic's change on a Redis Cluster, first step (the catalog slot): compare and set its
-- config, give it the next config version and leave the `configuring` marker (the
-- version) the sweep re-applies a crashed change by. The partitions follow, one
-- configure_partition.lua (or create_partition.lua, for new ones) each, then the marker
-- goes (kafkaesque/hot/log_steps.py).
-- KEYS[1] topic config, KEYS[2] archiving switch, KEYS[3] sequence floor, KEYS[4] steps,
-- KEYS[5] the configuring marker, KEYS[6] config versions (hash: topic -> last version)
-- ARGV: expected config, new config, now (ms), name
-- Returns {config version, archiving switch on (1/0), sequence floor}.
local changed = config_changed(KEYS[1], ARGV[1])
if changed then return changed end
redis.call('SET', KEYS[1], ARGV[2])
local version = redis.call('HINCRBY', KEYS[6], ARGV[4], 1)
redis.call('SET', KEYS[5], version)
redis.call('ZADD', KEYS[4], ARGV[3], KEYS[5])
return {version, redis.call('EXISTS', KEYS[2]), tonumber(redis.call('GET', KEYS[3]) or 0)}
