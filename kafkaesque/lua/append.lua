-- Append record batches to one partition: assign offsets and global sequence numbers,
-- patch each batch's baseOffset and partitionLeaderEpoch (both outside the CRC), roll
-- pages, apply retention. Returns the base offset of every batch.
-- KEYS[1] meta hash, KEYS[2] page index zset, KEYS[3] page stats hash, KEYS[4] global sequence
-- ARGV[1] key prefix of this partition, ARGV[2] notification channel,
-- then pairs (offset count, batch bytes)
local meta, index, stats, gseq_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix = ARGV[1]
local m = redis.call('HMGET', meta, 'end', 'page', 'page_records', 'page_bytes',
  'page_size', 'ttl', 'max_pages', 'epoch')
if not m[1] then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic or partition')
end
local next_offset, page = tonumber(m[1]), tonumber(m[2])
local page_records, page_bytes = tonumber(m[3]), tonumber(m[4])
local page_size, ttl, max_pages = tonumber(m[5]), tonumber(m[6]), tonumber(m[7])
local epoch = pack_uint(tonumber(m[8]), 4)

local total = 0
for i = 3, #ARGV, 2 do total = total + tonumber(ARGV[i]) end
local gseq = redis.call('INCRBY', gseq_key, total) - total + 1

local bases, appended_bytes = {}, 0
for i = 3, #ARGV, 2 do
  local count, batch = tonumber(ARGV[i]), ARGV[i + 1]
  if page_records == 0 then
    redis.call('ZADD', index, next_offset, page)
  end
  redis.call('RPUSH', page_key(prefix, page),
    pack_uint(next_offset, 8) .. string.sub(batch, 9, 12) .. epoch .. string.sub(batch, 17))
  redis.call('APPEND', batch_index_key(prefix, page), pack_uint(next_offset, 8) .. pack_uint(gseq, 8))
  bases[#bases + 1] = next_offset
  next_offset, gseq = next_offset + count, gseq + count
  page_records, page_bytes = page_records + count, page_bytes + #batch
  appended_bytes = appended_bytes + #batch
  if page_records >= page_size then
    -- Close the page: it is now immutable, gets the TTL, and counts towards max_pages.
    redis.call('HSET', stats, page, page_records .. ' ' .. page_bytes)
    if ttl > 0 then
      redis.call('EXPIRE', page_key(prefix, page), ttl)
      redis.call('EXPIRE', batch_index_key(prefix, page), ttl)
    end
    page, page_records, page_bytes = page + 1, 0, 0
  end
end
redis.call('HSET', meta, 'end', next_offset, 'page', page, 'page_records', page_records,
  'page_bytes', page_bytes)
redis.call('HINCRBY', meta, 'bytes', appended_bytes)

-- Retention: drop the oldest closed pages beyond max_pages, and index entries of pages
-- that expired, so the index never grows without bound.
local closed = redis.call('ZCARD', index) - (page_records > 0 and 1 or 0)
local start = trim_index(index, stats, prefix, page, closed, max_pages, next_offset)
redis.call('HSET', meta, 'start', start)
redis.call('PUBLISH', ARGV[2], next_offset)
return bases
