-- Create a topic atomically: nothing is written unless everything can be.
-- KEYS[1] topic set, KEYS[2] topic config, KEYS[3] recovery marker, KEYS[4] archiving
-- switch (the partitions get it in their meta), KEYS[5..] one meta hash per partition
-- ARGV: name, config (msgpack), settings ("name value ...", see settings_list)
local name = ARGV[1]
local refused = creation_refused(KEYS[1], KEYS[2], KEYS[3], name)
if refused then return refused end
for i = 5, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return redis.error_reply('TOPIC_EXISTS stale partition state for ' .. name)
  end
end
redis.call('SADD', KEYS[1], name)
redis.call('SET', KEYS[2], ARGV[2])
local archiving = redis.call('EXISTS', KEYS[4]) == 1
for i = 5, #KEYS do
  init_partition(KEYS[i], 0, 0, 0, ARGV[3])
  if archiving then redis.call('HSET', KEYS[i], 'archiving', 1) end
end
return #KEYS - 4
