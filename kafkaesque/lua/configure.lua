-- Change a topic: write its new config, apply its settings to every existing partition and
-- create the new partitions' state, only if the config is still the one the caller read
-- (compare and set). Serves AlterConfigs and CreatePartitions alike.
-- KEYS[1] topic config, KEYS[2..] meta hash of every partition, existing ones first
-- ARGV: expected config, new config, settings ("name value ...", see settings_list),
-- number of existing partitions
local current = redis.call('GET', KEYS[1])
if not current then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic')
end
if current ~= ARGV[1] then
  return redis.error_reply('CONFLICT the topic changed meanwhile')
end
local existing = tonumber(ARGV[4])
for i = 2 + existing, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return redis.error_reply('CONFLICT stale partition state')
  end
end
redis.call('SET', KEYS[1], ARGV[2])
local settings = settings_list(ARGV[3])
for i = 2, 1 + existing do
  redis.call('HSET', KEYS[i], unpack(settings))
end
for i = 2 + existing, #KEYS do
  init_partition(KEYS[i], 0, 0, 0, ARGV[3])
end
return #KEYS - 1 - existing
