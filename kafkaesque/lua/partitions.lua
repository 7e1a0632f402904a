-- Add partitions to a topic: write the new config and create the new partitions' state,
-- only if the config is still the one the caller read (compare and set).
-- KEYS[1] topic config, KEYS[2..] meta hash of each new partition
-- ARGV: expected config, new config, page_size, ttl, max_pages
local current = redis.call('GET', KEYS[1])
if not current then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic')
end
if current ~= ARGV[1] then
  return redis.error_reply('CONFLICT the topic changed meanwhile')
end
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return redis.error_reply('CONFLICT stale partition state')
  end
end
redis.call('SET', KEYS[1], ARGV[2])
for i = 2, #KEYS do
  init_partition(KEYS[i], 0, 0, 0, ARGV[3], ARGV[4], ARGV[5])
end
return #KEYS - 1
