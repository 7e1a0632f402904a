-- Apply a topic's settings to one of its partitions (a step of a configuration on a Redis
-- Cluster), unless it has them already or newer ones: `config_version` only grows. A
-- changed retention applies to its closed pages too (retime, as configure.lua).
-- KEYS[1] meta hash
-- ARGV[1] settings ("name value ..."), ARGV[2] config version, ARGV[3] topic id (hex)
-- Returns 1 if applied, 0 if it had that version or a newer one, -1 if the partition does
-- not exist (create_partition.lua creates it).
local m = redis.call('HMGET', KEYS[1], 'end', 'ttl', 'config_version', 'topic_id')
if not m[1] then return -1 end
if m[4] and m[4] ~= ARGV[3] then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION the partition is of another topic')
end
local version = tonumber(ARGV[2])
if tonumber(m[3] or 0) >= version then return 0 end
local settings = settings_list(ARGV[1])
local new_ttl = 0
for i = 1, #settings, 2 do
  if settings[i] == 'ttl' then new_ttl = tonumber(settings[i + 1]) end
end
local old_ttl = tonumber(m[2] or 0)
if old_ttl ~= new_ttl then retime(KEYS[1], old_ttl, new_ttl, is_archiving(KEYS[1])) end
redis.call('HSET', KEYS[1], 'config_version', version, unpack(settings))
return 1
