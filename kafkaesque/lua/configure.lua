-- Change a topic: write its new config, apply its settings to every existing partition and
-- create the new partitions' state, only if the config is still the one the caller read
-- (compare and set). Serves AlterConfigs and CreatePartitions alike.
-- A changed retention applies to the pages already closed too, as Kafka checks retention
-- against the current config (see retime).
-- KEYS[1] topic config, KEYS[2] archiving switch (new partitions get it in their meta),
-- KEYS[3..] meta hash of every partition, existing ones first
-- ARGV: expected config, new config, settings ("name value ...", see settings_list),
-- number of existing partitions

-- Give a partition's closed pages the new TTL (seconds; 0: none): a page keeps the age it
-- had under the old one (counted from when it got it: closing, or archiving), a page
-- without one gets it whole; with archiving on, an unarchived page gets none (its TTL
-- comes once archived, see mark_archived.lua).
local function retime(meta, old_ttl, new_ttl, archiving)
  local prefix = string.sub(meta, 1, -5)  -- meta is PREFIX .. 'meta'
  local m = redis.call('HMGET', meta, 'page', 'archived', 'end')
  local open_page, archived = tonumber(m[1]), tonumber(m[2])
  local pages = redis.call('ZRANGE', prefix .. 'index', 0, -1, 'WITHSCORES')
  for i = 1, #pages, 2 do
    local page = tonumber(pages[i])
    if page ~= open_page then
      local following = tonumber(pages[i + 3] or m[3])
      local page_keys = {page_key(prefix, page), batch_index_key(prefix, page)}
      local left = redis.call('PTTL', page_keys[1])
      for _, key in ipairs(page_keys) do
        if new_ttl == 0 then
          if left > 0 then redis.call('PERSIST', key) end
        elseif left > 0 then
          redis.call('PEXPIRE', key, math.max(1, left + (new_ttl - old_ttl) * 1000))
        elseif left == -1 and (not archiving or following <= archived) then
          redis.call('EXPIRE', key, new_ttl)
        end
      end
    end
  end
end
local current = redis.call('GET', KEYS[1])
if not current then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic')
end
if current ~= ARGV[1] then
  return redis.error_reply('CONFLICT the topic changed meanwhile')
end
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
