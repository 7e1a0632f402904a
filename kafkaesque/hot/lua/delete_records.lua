-- DeleteRecords: move one partition's log start up to ARGV[2], never down. The meta field
-- `floor` keeps it (every script's log start honours it); pages wholly below it are freed
-- now, archived or not, since offsets below the floor are never read nor archived.
-- KEYS[1] meta hash, KEYS[2] page index zset, KEYS[3] page stats hash
-- ARGV[1] key prefix, ARGV[2] the new log start (at most the log end)
-- Returns the log start Redis now has: the floor, or later if Redis starts later.
local meta, index, stats, prefix = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local m = redis.call('HMGET', meta, 'end', 'page', 'page_records', 'page_bytes', 'archived',
  'floor', 'ttl', 'page_max_ts', 'archiving')
if not m[1] then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic or partition')
end
local log_end, page, page_records = tonumber(m[1]), tonumber(m[2]), tonumber(m[3])
local offset = tonumber(ARGV[2])
if offset > log_end then
  return redis.error_reply('OFFSET_OUT_OF_RANGE offset ' .. ARGV[2] ..
    ' is past the log end ' .. m[1])
end
local floor = math.max(tonumber(m[6] or 0), offset)
redis.call('HSET', meta, 'floor', floor)
local archiving = m[9] == '1'
local page_bytes = tonumber(m[4])
if page_records > 0 and floor >= log_end then
  -- The open page is wholly deleted: close it so that trim_index frees it with the others.
  close_page(meta, stats, prefix, page, page_records, page_bytes, tonumber(m[7]), archiving,
    tonumber(m[8]))
  page, page_records, page_bytes = page + 1, 0, 0
  redis.call('HSET', meta, 'page', page, 'page_records', 0, 'page_bytes', 0)
end
local closed = redis.call('ZCARD', index) - (page_records > 0 and 1 or 0)
local start = trim_index(meta, index, stats, prefix, page, closed,
  meta_limits(meta, page_bytes), log_end, tonumber(m[5]), archiving)
redis.call('HSET', meta, 'start', start)
return start
