-- Find the first batch with the largest max timestamp: it holds the record ListOffsets
-- MAX_TIMESTAMP (-3) answers with, which the caller decodes it to find. Pages whose
-- largest max timestamp (stats, or the meta hash for the open page) is not above the best
-- so far are skipped unread.
-- KEYS[1] page index zset, KEYS[2] meta hash, KEYS[3] page stats hash
-- ARGV[1] key prefix, ARGV[2] the first offset to consider (the log start)
-- Returns the batch, or nothing when no batch has a timestamp.
local prefix, from = ARGV[1], tonumber(ARGV[2])
local page_max_ts = page_max_timestamps(KEYS[2], KEYS[3])
local best, best_ts = false, -1  -- -1: no timestamp
local function keep_latest(batch, last)
  local ts = max_timestamp(batch)
  if last >= from and ts > best_ts then best, best_ts = batch, ts end
end
for _, page in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local known = page_max_ts(page)
  if known == nil or known > best_ts then each_batch(page_key(prefix, page), keep_latest) end
end
return best
