-- Delete a topic and every key of its partitions.
-- KEYS[1] topic set, KEYS[2] topic config, then per partition: meta, page index, page stats,
-- producer state
-- ARGV[1] topic name, then one key prefix per partition
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic: ' .. ARGV[1])
end
redis.call('DEL', KEYS[2])
for p = 0, (#KEYS - 2) / 4 - 1 do
  local meta, index, stats, producers = KEYS[3 + 4 * p], KEYS[4 + 4 * p], KEYS[5 + 4 * p], KEYS[6 + 4 * p]
  local prefix = ARGV[2 + p]
  local open_page = redis.call('HGET', meta, 'page')
  for _, page in ipairs(redis.call('ZRANGE', index, 0, -1)) do
    redis.call('DEL', page_key(prefix, page), batch_index_key(prefix, page))
  end
  if open_page then
    redis.call('DEL', page_key(prefix, open_page), batch_index_key(prefix, open_page))
  end
  redis.call('DEL', meta, index, stats, producers, producers_seen_key(prefix),
    epochs_key(prefix), txn_open_key(prefix), txn_aborted_key(prefix))
end
return 1
