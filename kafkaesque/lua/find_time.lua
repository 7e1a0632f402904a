-- Find the first batch whose max timestamp is at or after ARGV[2] (Kafka's time index
-- works on max timestamps too); the caller decodes it to find the record.
-- KEYS[1] page index zset; ARGV[1] key prefix, ARGV[2] timestamp (ms)
-- Returns the batch, or nothing when every record is older.
local prefix, target = ARGV[1], tonumber(ARGV[2])
-- maxTimestamp sits at bytes 35..42 of a batch header; an int64.
local function max_timestamp(batch)
  local n = unpack_uint(batch, 36, 8)
  if n >= 2 ^ 63 then n = n - 2 ^ 64 end
  return n
end
for _, page in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local key = page_key(prefix, page)
  local last = redis.call('LINDEX', key, -1)
  if last and max_timestamp(last) >= target then
    local pos, chunk = 0, 64
    while true do
      local batches = redis.call('LRANGE', key, pos, pos + chunk - 1)
      for _, batch in ipairs(batches) do
        if max_timestamp(batch) >= target then return batch end
      end
      if #batches < chunk then break end
      pos = pos + chunk
    end
  end
end
return false
