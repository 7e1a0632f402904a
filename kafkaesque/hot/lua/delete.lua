-- Delete a topic and every key of its partitions.
-- KEYS[1] topic set, KEYS[2] topic config, then per partition: meta, page index, page stats,
-- producer state
-- ARGV[1] topic name, then one key prefix per partition
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic: ' .. ARGV[1])
end
redis.call('DEL', KEYS[2])
for p = 0, (#KEYS - 2) / 4 - 1 do
  delete_partition(KEYS[3 + 4 * p], KEYS[4 + 4 * p], KEYS[5 + 4 * p], KEYS[6 + 4 * p],
    ARGV[2 + p])
end
return 1
