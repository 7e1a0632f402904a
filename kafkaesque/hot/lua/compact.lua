-- Replace one closed page by its compacted version (kafkaesque/hot/compaction.py computes it),
-- only if the page is still the one the compactor read: same first offset, stats and batch
-- index, else CONFLICT (retention, expiry or another compactor changed it meanwhile).
-- Readers see the old page or the new one, never a mix.
-- KEYS[1] meta hash, KEYS[2] page index zset, KEYS[3] page stats hash
-- ARGV[1] key prefix, ARGV[2] page number, ARGV[3] its first offset, ARGV[4] its stats as
-- read ('' if none), ARGV[5] its batch index as read, ARGV[6] the new stats but for the
-- bytes: "records max_timestamp cleaned_ms tombstones", then per batch of the page, in
-- order: '=' keep it, '' drop it, or the batch that replaces it.
-- A surviving batch keeps its batch index entry (base offset, global sequence of its first
-- offset): both stay true, as a rewritten batch keeps its base offset. A page left with no
-- batch is removed and the next page takes over its first offset, so the log start never
-- moves (as in Kafka, compaction never moves the log start).
-- Returns {bytes before, bytes after}.
local prefix, page, first = ARGV[1], ARGV[2], ARGV[3]
local meta, index, stats = KEYS[1], KEYS[2], KEYS[3]
local open_page = redis.call('HGET', meta, 'page')
if not open_page then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic or partition')
end
local key, bidx_key = page_key(prefix, page), batch_index_key(prefix, page)
local score = redis.call('ZSCORE', index, page)
local bidx = redis.call('GET', bidx_key) or ''
local count = #ARGV - 6
if tonumber(page) >= tonumber(open_page) or not score or tonumber(score) ~= tonumber(first)
    or (redis.call('HGET', stats, page) or '') ~= ARGV[4] or bidx ~= ARGV[5]
    or #bidx ~= count * BATCH_INDEX_ENTRY or redis.call('LLEN', key) ~= count
    or redis.call('EXISTS', key) == 0 then  -- expired: retention's to drop, not ours
  return redis.error_reply('CONFLICT page ' .. page .. ' changed since the compactor read it')
end
closed_bytes(meta, stats)  -- the counter, summed first for a partition that predates it
local old_bytes = page_stat_bytes(stats, page)

local old = redis.call('LRANGE', key, 0, -1)
local batches, entries, new_bytes, changed = {}, {}, 0, false
for i = 1, count do
  local action = ARGV[6 + i]
  if action ~= '' then
    local batch = action == '=' and old[i] or action
    batches[#batches + 1] = batch
    entries[#entries + 1] = string.sub(bidx, (i - 1) * BATCH_INDEX_ENTRY + 1, i * BATCH_INDEX_ENTRY)
    new_bytes = new_bytes + #batch
  end
  if action ~= '=' then changed = true end
end

if #batches == 0 then
  local following = next_indexed(index, tonumber(first))
  if not following then
    return redis.error_reply('CONFLICT page ' .. page .. ' has no later page to take its offsets')
  end
  redis.call('ZADD', index, first, following)
  drop_page(meta, index, stats, prefix, page)
  return {old_bytes, 0}
end

if changed then
  local ttl = redis.call('PTTL', key)  -- an archived page's expiry stays
  redis.call('DEL', key)
  for i = 1, #batches, 1000 do  -- unpack has a limit on its results
    redis.call('RPUSH', key, unpack(batches, i, math.min(i + 999, #batches)))
  end
  redis.call('SET', bidx_key, table.concat(entries))
  if ttl > 0 then
    redis.call('PEXPIRE', key, ttl)
    redis.call('PEXPIRE', bidx_key, ttl)
  end
end
local records, rest = string.match(ARGV[6], '^(%d+) (.*)$')
redis.call('HSET', stats, page, records .. ' ' .. new_bytes .. ' ' .. rest)
redis.call('HINCRBY', meta, 'closed_bytes', new_bytes - old_bytes)
return {old_bytes, new_bytes}
