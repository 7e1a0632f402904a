-- Restore one topic after Redis lost data, from what the archive holds: a missing topic or
-- partition is recreated at the archived end, and a partition whose log end is below the
-- archived end drops what it still holds (all archived) and continues there. Restored
-- partitions get a higher leader epoch so clients can detect the truncation (KIP-320); the
-- partition's epoch history (epoch -> start offset, for OffsetForLeaderEpoch) records it.
-- Either way the partition keeps the log start DeleteRecords moved (its floor), and is
-- archived from now on (its meta's `archiving`: restored from an archive).
-- KEYS[1] topic set, KEYS[2] topic config (both left out on a Redis Cluster, where the
-- caller writes the catalog first and calls this once per partition), then per partition:
-- meta, index, stats
-- ARGV: name, config (msgpack), settings ("name value ..."), then per partition:
-- archived end offset, last known leader epoch, floor (offsets below it were deleted)
local name = ARGV[1]
local first = 1
if #KEYS % 3 == 2 then
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('SET', KEYS[2], ARGV[2])
  end
  redis.call('SADD', KEYS[1], name)
  first = 3
end
local restored = 0
for p = 0, (#KEYS - first + 1) / 3 - 1 do
  local meta, index, stats = KEYS[first + 3 * p], KEYS[first + 1 + 3 * p], KEYS[first + 2 + 3 * p]
  local prefix = string.sub(meta, 1, #meta - 4)  -- the key without "meta"
  local archived_end, epoch = tonumber(ARGV[4 + 3 * p]), tonumber(ARGV[5 + 3 * p])
  local floor = tonumber(ARGV[6 + 3 * p])
  local m = redis.call('HMGET', meta, 'end', 'epoch', 'page')
  if not m[1] then
    init_partition(meta, archived_end, epoch + 1, 0, ARGV[3])
    redis.call('HSET', epochs_key(prefix), epoch + 1, archived_end)
    restored = restored + 1
  elseif tonumber(m[1]) < archived_end then
    for _, page in ipairs(redis.call('ZRANGE', index, 0, -1)) do
      redis.call('DEL', page_key(prefix, page), batch_index_key(prefix, page))
    end
    redis.call('DEL', page_key(prefix, m[3]), batch_index_key(prefix, m[3]), index, stats)
    -- The records of its open transactions are gone with the pages (the archive holds
    -- none of them: the archiver stops at the last stable offset).
    redis.call('DEL', txn_open_key(prefix))
    local new_epoch = math.max(epoch, tonumber(m[2])) + 1
    init_partition(meta, archived_end, new_epoch, tonumber(m[3]) + 1, ARGV[3])
    redis.call('HSET', epochs_key(prefix), new_epoch, archived_end)
    restored = restored + 1
  end
  redis.call('HSET', meta, 'archiving', 1)
  if floor > tonumber(redis.call('HGET', meta, 'floor') or 0) then
    redis.call('HSET', meta, 'floor', floor)
  end
end
return restored
