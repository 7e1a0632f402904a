-- A topic's creation on a Redis Cluster, first step (the catalog slot): refuse if the topic
-- exists or is being deleted, else add it, write its config and the `creating` marker the
-- sweep finishes a crashed creation by. The partitions follow, one create_partition.lua
-- each, then the marker goes (kafkaesque/hot/log_steps.py).
-- KEYS[1] topic set, KEYS[2] topic config, KEYS[3] recovery marker, KEYS[4] archiving
-- switch, KEYS[5] sequence floor, KEYS[6] steps (sorted set of markers by start, ms),
-- KEYS[7] the creating marker, KEYS[8] the deleting marker
-- ARGV: name, config (msgpack), now (ms), topic id (hex: the marker's value)
-- Returns {archiving switch on (1/0), sequence floor}: read after the topic exists, so an
-- enabler of archiving or an archiver's tick either sees the topic or is seen here.
local name = ARGV[1]
local refused = creation_refused(KEYS[1], KEYS[2], KEYS[3], name)
if refused then return refused end
if redis.call('EXISTS', KEYS[8]) == 1 then
  return redis.error_reply('TOPIC_EXISTS topic is being deleted: ' .. name)
end
redis.call('SADD', KEYS[1], name)
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[7], ARGV[4])
redis.call('ZADD', KEYS[6], ARGV[3], KEYS[7])
return {redis.call('EXISTS', KEYS[4]), tonumber(redis.call('GET', KEYS[5]) or 0)}
