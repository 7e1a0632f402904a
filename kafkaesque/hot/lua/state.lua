-- Apply retention to one partition and report its state.
-- KEYS[1] meta hash, KEYS[2] page index zset, KEYS[3] page stats hash; ARGV[1] key prefix
-- Returns {log start, log end, leader epoch, pages held, bytes held, records held, floor}
-- (floor: offsets below it were deleted by DeleteRecords).
local m = redis.call('HMGET', KEYS[1], 'end', 'page', 'page_records', 'page_bytes',
  'epoch', 'archived', 'floor', 'archiving')
if not m[1] then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic or partition')
end
local log_end, open_page = tonumber(m[1]), tonumber(m[2])
local page_records, page_bytes = tonumber(m[3]), tonumber(m[4])
local closed = redis.call('ZCARD', KEYS[2]) - (page_records > 0 and 1 or 0)
local start = trim_index(KEYS[1], KEYS[2], KEYS[3], ARGV[1], open_page, closed,
  meta_limits(KEYS[1], page_bytes), log_end, tonumber(m[6]), m[8] == '1')
redis.call('HSET', KEYS[1], 'start', start)
local bytes, records = page_bytes, page_records
for _, value in ipairs(redis.call('HVALS', KEYS[3])) do
  local page_records, page_bytes = string.match(value, '^(%d+) (%d+)')
  records = records + tonumber(page_records)
  bytes = bytes + tonumber(page_bytes)
end
return {start, log_end, tonumber(m[5]), redis.call('ZCARD', KEYS[2]), bytes, records,
  tonumber(m[7] or 0)}
