-- Change a topic: write its new config, apply its settings to every existing partition and
-- create the new partitions' state, only if the config is still the one the caller read
-- (compare and set). Serves AlterConfigs and CreatePartitions alike.
-- A changed retention applies to the pages already closed too, as Kafka checks retention
-- against the current config (see retime).
-- KEYS[1] topic config, KEYS[2] archiving switch (new partitions get it in their meta),
-- KEYS[3..] meta hash of every partition, existing ones first
-- ARGV: expected config, new config, settings ("name value ...", see settings_list),
-- number of existing partitions

local changed = config_changed(KEYS[1], ARGV[1])
if changed then return changed end
local existing = tonumber(ARGV[4])
local first_meta = 3
for i = first_meta + existing, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return redis.error_reply('CONFLICT stale partition state')
  end
end
redis.call('SET', KEYS[1], ARGV[2])
local settings = settings_list(ARGV[3])
local new_ttl = 0
for i = 1, #settings, 2 do
  if settings[i] == 'ttl' then new_ttl = tonumber(settings[i + 1]) end
end
for i = first_meta, first_meta + existing - 1 do
  local old_ttl = tonumber(redis.call('HGET', KEYS[i], 'ttl') or 0)
  if old_ttl ~= new_ttl then retime(KEYS[i], old_ttl, new_ttl, is_archiving(KEYS[i])) end
  redis.call('HSET', KEYS[i], unpack(settings))
end
local archiving = redis.call('EXISTS', KEYS[2]) == 1
for i = first_meta + existing, #KEYS do
  init_partition(KEYS[i], 0, 0, 0, ARGV[3])
  if archiving then redis.call('HSET', KEYS[i], 'archiving', 1) end
end
return #KEYS - first_meta + 1 - existing
