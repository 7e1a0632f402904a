-- Record that offsets below ARGV[2] are archived, then let retention act on them: fully
-- archived closed pages get their TTL and count towards max pages.
-- KEYS[1] meta hash, KEYS[2] page index zset, KEYS[3] page stats hash
-- ARGV[1] key prefix, ARGV[2] archived-through (the next offset to archive),
-- ARGV[3] '1' to release every archived closed page now (Redis is short of memory)
local prefix, through = ARGV[1], tonumber(ARGV[2])
local m = redis.call('HMGET', KEYS[1], 'end', 'page', 'page_records', 'ttl', 'page_bytes',
  'archived', 'expiry_page')
if not m[1] then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic or partition')
end
local log_end, open_page, page_records = tonumber(m[1]), tonumber(m[2]), tonumber(m[3])
local ttl = tonumber(m[4])
local archived = math.max(tonumber(m[6]), through)
-- Pages below expiry_page already have their TTL; walk on from there.
local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)
local page = math.max(tonumber(m[7] or 0), tonumber(oldest[1] or open_page))
if ttl > 0 then
  while page < open_page do
    local first = redis.call('ZSCORE', KEYS[2], page)
    if first then  -- else the compactor removed it
      local _, next_first = next_indexed(KEYS[2], tonumber(first))
      if (next_first or log_end) > archived then break end
      redis.call('EXPIRE', page_key(prefix, page), ttl)
      redis.call('EXPIRE', batch_index_key(prefix, page), ttl)
    end
    page = page + 1
  end
end
local closed = redis.call('ZCARD', KEYS[2]) - (page_records > 0 and 1 or 0)
local start = trim_index(KEYS[1], KEYS[2], KEYS[3], prefix, open_page, closed,
  meta_limits(KEYS[1], tonumber(m[5])), log_end, archived, true, ARGV[3] == '1')
redis.call('HSET', KEYS[1], 'archived', archived, 'expiry_page', page, 'start', start)
return archived
