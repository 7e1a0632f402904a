-- A topic's deletion on a Redis Cluster, first step (the catalog slot): remove it from the
-- topic set, delete its config and leave the `deleting` marker (its id and partition
-- count) the sweep finishes a crashed deletion by; a creation or change of it in progress
-- is dropped. The partitions follow, one delete_partition.lua each, then the marker goes
-- (kafkaesque/hot/log_steps.py).
-- KEYS[1] topic set, KEYS[2] topic config, KEYS[3] steps, KEYS[4] the deleting marker,
-- KEYS[5] the creating marker, KEYS[6] the configuring marker, KEYS[7] config versions
-- ARGV: name, marker ("PARTITIONS TOPIC_ID_HEX"), now (ms), the config the caller read
-- (compare and set: a change meanwhile may have added partitions)
local current = redis.call('GET', KEYS[2])
if not current or redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic: ' .. ARGV[1])
end
if current ~= ARGV[4] then
  return redis.error_reply('CONFLICT the topic changed meanwhile')
end
redis.call('SREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2], KEYS[5], KEYS[6])
redis.call('ZREM', KEYS[3], KEYS[5], KEYS[6])
redis.call('HDEL', KEYS[7], ARGV[1])
redis.call('SET', KEYS[4], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], KEYS[4])
return 1
