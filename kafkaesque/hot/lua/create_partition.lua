-- Create one partition of a topic (a step of a creation or a growth on a Redis Cluster):
-- its meta with the topic's settings and id, `archiving` when the switch was on, and its
-- slot's sequence counter raised to the catalog's floor. Done already (meta with this
-- topic id): nothing changes, so a sweep may repeat it.
-- KEYS[1] meta hash, KEYS[2] the slot's hash
-- ARGV[1] settings ("name value ..."), ARGV[2] topic id (hex), ARGV[3] archiving (1/0),
-- ARGV[4] sequence floor, ARGV[5] config version
-- Returns 1 if created, 0 if it was there.
local id = redis.call('HGET', KEYS[1], 'topic_id')
if id == ARGV[2] then return 0 end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('TOPIC_EXISTS stale partition state')
end
init_partition(KEYS[1], 0, 0, 0, ARGV[1])
redis.call('HSET', KEYS[1], 'topic_id', ARGV[2], 'config_version', ARGV[5])
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'archiving', 1) end
raise_sequence(KEYS[2], tonumber(ARGV[4]))
return 1
