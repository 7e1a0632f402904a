-- Create a topic atomically: nothing is written unless everything can be.
-- KEYS[1] topic set, KEYS[2] topic config, KEYS[3..] one meta hash per partition
-- ARGV: name, config (msgpack), page_size, ttl, max_pages
local name = ARGV[1]
if redis.call('SISMEMBER', KEYS[1], name) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then
  return redis.error_reply('TOPIC_EXISTS topic already exists: ' .. name)
end
for i = 3, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return redis.error_reply('TOPIC_EXISTS stale partition state for ' .. name)
  end
end
redis.call('SADD', KEYS[1], name)
redis.call('SET', KEYS[2], ARGV[2])
for i = 3, #KEYS do
  redis.call('HSET', KEYS[i],
    'end', 0, 'start', 0, 'epoch', 0, 'archived', 0,
    'page', 0, 'page_records', 0, 'page_bytes', 0, 'bytes', 0,
    'page_size', ARGV[3], 'ttl', ARGV[4], 'max_pages', ARGV[5])
end
return #KEYS - 2
