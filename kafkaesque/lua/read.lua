-- Read whole batches of one partition from the batch holding ARGV[2] onwards.
-- KEYS[1] meta hash, KEYS[2] page index zset, KEYS[3] open transactions hash,
-- KEYS[4] aborted transactions zset
-- ARGV: key prefix, offset, max_bytes, max_records, min_one (1: return the first batch
-- even when it exceeds the limits, as Kafka does for the first partition of a fetch, KIP-74),
-- committed (1: READ_COMMITTED, only whole batches below the last stable offset, and the
-- aborted transactions overlapping them)
-- Returns {status, log start, log end, leader epoch, last stable offset,
-- {"pid:first:last" of aborted transactions}, batch...}; status 0 = ok,
-- 1 = offset below the log start, 2 = offset past the log end, 3 = offset below the floor
-- DeleteRecords set (deleted everywhere: no use asking the archive).
local prefix = ARGV[1]
local offset, max_bytes, max_records = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local min_one = ARGV[5] == '1'
local committed = ARGV[6] == '1'
local m = redis.call('HMGET', KEYS[1], 'end', 'epoch', 'floor')
if not m[1] then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic or partition')
end
local log_end, epoch = tonumber(m[1]), tonumber(m[2])
local lso = last_stable(KEYS[3], log_end)
-- Under READ_COMMITTED nothing at or past the last stable offset is read.
local limit = committed and lso or log_end
local aborted = {}

-- The log start is the first indexed page whose data still exists (TTL may have removed
-- older ones before the next append trims their index entries), or DeleteRecords' floor.
local start, rank = log_end, 0
while true do
  local entry = redis.call('ZRANGE', KEYS[2], rank, rank, 'WITHSCORES')
  if #entry == 0 then break end
  if redis.call('EXISTS', page_key(prefix, entry[1])) == 1 then
    start = tonumber(entry[2])
    break
  end
  rank = rank + 1
end
local floor = tonumber(m[3] or 0)
start = math.max(start, floor)
if offset < floor then return {3, start, log_end, epoch, lso, aborted} end
if offset < start then return {1, start, log_end, epoch, lso, aborted} end
if offset > log_end then return {2, start, log_end, epoch, lso, aborted} end
local HEAD = 6
local result = {0, start, log_end, epoch, lso, aborted}
if offset >= limit or (max_bytes <= 0 and not min_one) then return result end

-- The aborted transactions a READ_COMMITTED reader of the batches read needs to drop
-- their records: those ending at or after the first batch and starting before the end.
local function with_aborted()
  if not committed or #result == HEAD then return result end
  local low = unpack_uint(result[HEAD + 1], BASE_OFFSET, BASE_OFFSET_WIDTH)
  local last = result[#result]
  local high = unpack_uint(last, BASE_OFFSET, BASE_OFFSET_WIDTH) + offset_count(last)
  for _, entry in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], low, '+inf')) do
    local first = tonumber(string.match(entry, '^%d+:(%d+):'))
    if first < high then aborted[#aborted + 1] = entry end
  end
  return result
end

local found = redis.call('ZREVRANGEBYSCORE', KEYS[2], offset, '-inf', 'LIMIT', 0, 1)
local page = tonumber(found[1])
-- Binary search the page's batch index for the last batch starting at or before offset.
local bidx = batch_index_key(prefix, page)
local lo, hi = 0, redis.call('STRLEN', bidx) / BATCH_INDEX_ENTRY - 1
while lo < hi do
  local mid = math.floor((lo + hi + 1) / 2)
  local base = unpack_uint(redis.call('GETRANGE', bidx, mid * BATCH_INDEX_ENTRY,
    mid * BATCH_INDEX_ENTRY + 7), 1, 8)
  if base <= offset then lo = mid else hi = mid - 1 end
end

local bytes, records, pos, chunk = 0, 0, lo, 64
while true do
  local batches = redis.call('LRANGE', page_key(prefix, page), pos, pos + chunk - 1)
  for _, batch in ipairs(batches) do
    -- The batch found may end before the offset when the compactor removed the batches
    -- after it: skip it, or a reader with a small budget would get it again and again.
    local batch_end = unpack_uint(batch, BASE_OFFSET, BASE_OFFSET_WIDTH) + offset_count(batch)
    if #result > HEAD or batch_end > offset then
      -- A batch across the last stable offset waits until its transaction ends.
      if batch_end > limit then return with_aborted() end
      local must = min_one and #result == HEAD
      if not must and (bytes + #batch > max_bytes or records >= max_records) then
        return with_aborted()
      end
      result[#result + 1] = batch
      bytes = bytes + #batch
      records = records + offset_count(batch)
    end
  end
  if #batches < chunk then
    -- The next page (numbers may skip pages the compactor emptied and removed).
    page = next_indexed(KEYS[2], tonumber(redis.call('ZSCORE', KEYS[2], page)))
    if not page then return with_aborted() end
    pos = 0
  else
    pos = pos + chunk
  end
end
