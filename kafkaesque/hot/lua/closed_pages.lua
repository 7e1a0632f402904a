-- Closed pages from the one holding ARGV[2] on, for the archiver, oldest first.
-- KEYS[1] meta hash, KEYS[2] page index zset
-- ARGV[1] key prefix, ARGV[2] from offset, ARGV[3] max pages
-- Returns a flat list: per page, its number, first offset, next offset, batch index
-- (16 bytes per batch: base offset, first global sequence), batch count, then the batches.
local prefix, from, max_pages = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local m = redis.call('HMGET', KEYS[1], 'end', 'page')
if not m[1] then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic or partition')
end
local log_end, open_page = tonumber(m[1]), tonumber(m[2])
local found = redis.call('ZREVRANGEBYSCORE', KEYS[2], from, '-inf', 'LIMIT', 0, 1)
if #found == 0 then
  found = redis.call('ZRANGE', KEYS[2], 0, 0)
end
local out = {}
if #found == 0 then return out end
local page, first = tonumber(found[1]), tonumber(redis.call('ZSCORE', KEYS[2], found[1]))
local pages = 0
while page and page < open_page and pages < max_pages do
  local following, next_first = next_indexed(KEYS[2], first)
  local next_offset = next_first or log_end
  if next_offset > from then
    local batches = redis.call('LRANGE', page_key(prefix, page), 0, -1)
    local bidx = redis.call('GET', batch_index_key(prefix, page)) or ''
    out[#out + 1] = page
    out[#out + 1] = first
    out[#out + 1] = next_offset
    out[#out + 1] = bidx
    out[#out + 1] = #batches
    for _, batch in ipairs(batches) do out[#out + 1] = batch end
    pages = pages + 1
  end
  page, first = following, next_first
end
return out
