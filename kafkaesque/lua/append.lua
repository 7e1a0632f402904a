-- Append record batches to one partition: check idempotent producers' sequence numbers,
-- assign offsets and global sequence numbers, patch each batch's baseOffset and
-- partitionLeaderEpoch (both outside the CRC), roll pages, apply retention.
-- KEYS[1] meta hash, KEYS[2] page index zset, KEYS[3] page stats hash,
-- KEYS[4] global sequence counter, KEYS[5] producer state hash, KEYS[6] archiving flag,
-- KEYS[7] recovery marker
-- ARGV[1] key prefix of this partition, ARGV[2] notification channel, ARGV[3] now (ms),
-- then per batch: offset count, producer id, producer epoch, base sequence, batch bytes.
-- Returns {log start offset, base offset per batch}, or an error reply naming the Kafka
-- error (kafkaesque/errors.py); on error nothing is written.
local meta, index, stats, gseq_key, producers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix = ARGV[1]
if redis.call('EXISTS', KEYS[7]) == 0 then
  -- Redis lost its data: appending now could reuse offsets the archive already holds.
  return redis.error_reply('NEEDS_RECOVERY Redis has lost its data')
end
local archiving = redis.call('EXISTS', KEYS[6]) == 1
local m = redis.call('HMGET', meta, 'end', 'page', 'page_records', 'page_bytes',
  'page_size', 'ttl', 'segment_bytes', 'epoch', 'archived', 'page_max_ts', 'segment_ms',
  'page_opened')
if not m[1] then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic or partition')
end
local next_offset, page = tonumber(m[1]), tonumber(m[2])
local page_records, page_bytes = tonumber(m[3]), tonumber(m[4])
local page_size, ttl = tonumber(m[5]), tonumber(m[6])
-- segment.bytes and segment.ms close a page too (absent for topics older than them).
local segment_bytes, segment_ms = tonumber(m[7] or 0), tonumber(m[11] or 0)
local now = tonumber(ARGV[3])
local epoch = pack_uint(tonumber(m[8]), 4)
-- The open page's largest maxTimestamp (nil: unknown, for a page opened before it was kept).
local page_max_ts = tonumber(m[10])

-- Idempotent producers: state per producer id is "epoch first:last:offset ..." for its
-- last 5 batches, as Kafka keeps. A retry of one of them is acknowledged with its original
-- offset and not written again.
local MAX_SEQ = 2147483648
local function refuse(name) return redis.error_reply(name .. ' producer sequence check failed') end
-- A producer in mid-sequence that this partition has no state for (Redis lost it, or the
-- id expired) is UNKNOWN_PRODUCER_ID: clients bump their epoch and go on (KIP-360), where
-- OUT_OF_ORDER_SEQUENCE_NUMBER would be fatal to them.
local states, bases, fresh = {}, {}, {}
local function load(pid)
  if states[pid] == nil then
    local raw = redis.call('HGET', producers, pid)
    local state = false
    if raw then
      state = {batches = {}}
      for word in string.gmatch(raw, '%S+') do
        if not state.epoch then
          state.epoch = tonumber(word)
        else
          local f, l, o = string.match(word, '(%d+):(%d+):(%d+)')
          state.batches[#state.batches + 1] = {tonumber(f), tonumber(l), tonumber(o)}
        end
      end
    end
    states[pid] = state
  end
  return states[pid]
end

local n = 0
for i = 4, #ARGV, 5 do
  n = n + 1
  local count, pid = tonumber(ARGV[i]), ARGV[i + 1]
  fresh[n] = true
  if pid ~= '-1' then
    local pepoch, first = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
    local last = (first + count - 1) % MAX_SEQ
    local state = load(pid)
    if state and pepoch < state.epoch then return refuse('INVALID_PRODUCER_EPOCH') end
    if state and pepoch == state.epoch then
      for _, b in ipairs(state.batches) do
        if b[1] == first and b[2] == last and b[3] >= 0 then
          bases[n], fresh[n] = b[3], false
        end
      end
      if fresh[n] then
        local newest = state.batches[#state.batches]
        local expected = newest and (newest[2] + 1) % MAX_SEQ or 0
        if first ~= expected then
          -- Ahead: an earlier batch has not arrived (a request refused during an
          -- outage, to be retried). "Not yet" lets the client retry in order; Kafka's
          -- OUT_OF_ORDER makes librdkafka bump its epoch and renumber batches it sent
          -- before, which writes twice one whose answer was lost.
          local ahead = (first - expected) % MAX_SEQ < MAX_SEQ / 2
          return refuse(ahead and 'SEQUENCE_AHEAD' or 'OUT_OF_ORDER_SEQUENCE_NUMBER')
        end
      end
    else
      -- A new producer, or a new epoch of one, starts at sequence 0.
      if first ~= 0 then return refuse(state and 'OUT_OF_ORDER_SEQUENCE_NUMBER' or 'UNKNOWN_PRODUCER_ID') end
      state = {epoch = pepoch, batches = {}}
      states[pid] = state
    end
    if fresh[n] then
      state.batches[#state.batches + 1] = {first, last, -1, n}
      if #state.batches > 5 then table.remove(state.batches, 1) end
    end
  end
end

local total = 0
for i = 4, #ARGV, 5 do total = total + tonumber(ARGV[i]) end
local gseq = redis.call('INCRBY', gseq_key, total) - total + 1

local appended_bytes = 0
n = 0
for i = 4, #ARGV, 5 do
  n = n + 1
  local count, batch = tonumber(ARGV[i]), ARGV[i + 4]
  if fresh[n] then
    local batch_max_ts = max_timestamp(batch)
    if page_records > 0 and segment_ms > 0 and now - tonumber(m[12] or now) >= segment_ms then
      close_page(meta, stats, prefix, page, page_records, page_bytes, ttl, archiving, page_max_ts)
      page, page_records, page_bytes = page + 1, 0, 0
    end
    if page_records == 0 then
      redis.call('ZADD', index, next_offset, page)
      redis.call('HSET', meta, 'page_opened', ARGV[3])
      m[12] = ARGV[3]
      page_max_ts = batch_max_ts
    elseif page_max_ts and batch_max_ts > page_max_ts then
      page_max_ts = batch_max_ts
    end
    redis.call('RPUSH', page_key(prefix, page), with_offset_and_epoch(batch, next_offset, epoch))
    redis.call('APPEND', batch_index_key(prefix, page),
      pack_uint(next_offset, 8) .. pack_uint(gseq, 8))
    bases[n] = next_offset
    next_offset, gseq = next_offset + count, gseq + count
    page_records, page_bytes = page_records + count, page_bytes + #batch
    appended_bytes = appended_bytes + #batch
    if page_records >= page_size or (segment_bytes > 0 and page_bytes >= segment_bytes) then
      close_page(meta, stats, prefix, page, page_records, page_bytes, ttl, archiving, page_max_ts)
      page, page_records, page_bytes = page + 1, 0, 0
    end
  end
end

-- Producer ids unused for a day are forgotten (Kafka's producer.id.expiration.ms), so the
-- producer state stays bounded however many short-lived producers come and go; a few are
-- dropped per append, oldest first, tracked in a sorted set by last use.
local PRODUCER_EXPIRY_MS = 86400000
local seen, touched = producers_seen_key(prefix), false
for pid, state in pairs(states) do
  if state then
    local words = {state.epoch}
    for _, b in ipairs(state.batches) do
      local offset = b[3] >= 0 and b[3] or bases[b[4]]
      words[#words + 1] = b[1] .. ':' .. b[2] .. ':' .. offset
    end
    redis.call('HSET', producers, pid, table.concat(words, ' '))
    redis.call('ZADD', seen, now, pid)
    touched = true
  end
end
if touched then
  local expired = redis.call('ZRANGEBYSCORE', seen, '-inf', now - PRODUCER_EXPIRY_MS,
    'LIMIT', 0, 16)
  if #expired > 0 then
    redis.call('HDEL', producers, unpack(expired))
    redis.call('ZREM', seen, unpack(expired))
  end
end

redis.call('HSET', meta, 'end', next_offset, 'page', page, 'page_records', page_records,
  'page_bytes', page_bytes)
if page_max_ts and page_records > 0 then
  redis.call('HSET', meta, 'page_max_ts', string.format('%.0f', page_max_ts))
end
redis.call('HINCRBY', meta, 'bytes', appended_bytes)

-- Retention: drop the oldest closed pages beyond max_pages or retention_bytes, and index
-- entries of pages that expired, so the index never grows without bound.
local closed = redis.call('ZCARD', index) - (page_records > 0 and 1 or 0)
local start = trim_index(meta, index, stats, prefix, page, closed, meta_limits(meta, page_bytes),
  next_offset, tonumber(m[9]), archiving)
redis.call('HSET', meta, 'start', start)
if appended_bytes > 0 then redis.call('PUBLISH', ARGV[2], next_offset) end
table.insert(bases, 1, start)
return bases
