-- Close the open page if it has records and its first append is older than ARGV[2] (ms),
-- so the archiver drains quiet partitions too. Returns 1 if a page was closed.
-- KEYS[1] meta hash, KEYS[2] page stats hash
-- ARGV[1] key prefix, ARGV[2] opened-before time (ms)
local m = redis.call('HMGET', KEYS[1], 'page', 'page_records', 'page_bytes', 'page_opened',
  'ttl', 'page_max_ts', 'archiving')
if not m[1] then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic or partition')
end
local page, page_records = tonumber(m[1]), tonumber(m[2])
if page_records == 0 or tonumber(m[4] or 0) > tonumber(ARGV[2]) then return 0 end
close_page(KEYS[1], KEYS[2], ARGV[1], page, page_records, tonumber(m[3]), tonumber(m[5]),
  m[7] == '1', tonumber(m[6]))
redis.call('HSET', KEYS[1], 'page', page + 1, 'page_records', 0, 'page_bytes', 0)
return 1
