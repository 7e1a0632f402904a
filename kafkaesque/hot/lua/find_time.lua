-- Find the first batch whose max timestamp is at or after ARGV[2], as Kafka's time index
-- does (timestamps need not grow with offsets); the caller decodes it to find the record.
-- Pages whose largest max timestamp (stats, or the meta hash for the open page) is older
-- are skipped unread.
-- KEYS[1] page index zset, KEYS[2] meta hash, KEYS[3] page stats hash
-- ARGV[1] key prefix, ARGV[2] timestamp (ms), ARGV[3] the first offset to consider (the log
-- start: a page may still hold records below DeleteRecords' floor)
-- Returns the batch, or nothing when every record is older.
local prefix, target, from = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local page_max_ts = page_max_timestamps(KEYS[2], KEYS[3])
local found = false
local function reaches(batch, last)
  if last >= from and max_timestamp(batch) >= target then
    found = batch
    return true
  end
end
for _, page in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local known = page_max_ts(page)
  -- nil: unknown, read the page
  if (known == nil or known >= target) and each_batch(page_key(prefix, page), reaches) then
    return found
  end
end
return false
