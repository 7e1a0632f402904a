-- Find the first batch whose max timestamp is at or after ARGV[2], as Kafka's time index
-- does (timestamps need not grow with offsets); the caller decodes it to find the record.
-- Pages whose largest max timestamp (stats, or the meta hash for the open page) is older
-- are skipped unread.
-- KEYS[1] page index zset, KEYS[2] meta hash, KEYS[3] page stats hash
-- ARGV[1] key prefix, ARGV[2] timestamp (ms), ARGV[3] the first offset to consider (the log
-- start: a page may still hold records below DeleteRecords' floor)
-- Returns the batch, or nothing when every record is older.
local prefix, target, from = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local open = redis.call('HMGET', KEYS[2], 'page', 'page_max_ts')
local function page_max_ts(page)
  if page == open[1] then return tonumber(open[2]) end
  local stat = redis.call('HGET', KEYS[3], page)
  return stat and tonumber(string.match(stat, '^%d+ %d+ (%-?%d+)'))
end
for _, page in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local known = page_max_ts(page)
  if known == nil or known >= target then  -- nil: unknown, read the page
    local key = page_key(prefix, page)
    local pos, chunk = 0, 64
    while true do
      local batches = redis.call('LRANGE', key, pos, pos + chunk - 1)
      for _, batch in ipairs(batches) do
        local last = unpack_uint(batch, BASE_OFFSET, BASE_OFFSET_WIDTH) + offset_count(batch) - 1
        if last >= from and max_timestamp(batch) >= target then return batch end
      end
      if #batches < chunk then break end
      pos = pos + chunk
    end
  end
end
return false
