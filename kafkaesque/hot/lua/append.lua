-- Append record batches to one partition: check idempotent producers' sequence numbers,
-- assign offsets and global sequence numbers, patch each batch's baseOffset and
-- partitionLeaderEpoch (both outside the CRC), roll pages, apply retention. A
-- transactional batch from a producer with no open transaction here opens one.
-- KEYS[1] meta hash, KEYS[2] page index zset, KEYS[3] page stats hash,
-- KEYS[4] sequence counter (one Redis) or the slot's hash (a cluster), KEYS[5] producer
-- state hash, KEYS[6] recovery marker, KEYS[7] open transactions hash, KEYS[8] ended
-- transactions hash
-- ARGV[1] key prefix of this partition, ARGV[2] notification channel, ARGV[3] now (ms),
-- ARGV[4] sequence floor (0 on one Redis: see next_sequence), ARGV[5] the appending
-- broker's node id ('' for none: the CLI, tools), ARGV[6] the serial number of the
-- transaction the broker verified the batches' transactional producer is in ('' for none:
-- no check), ARGV[7] how many Redis replicas acks=all waits for (0: none), then per batch:
-- offset count, producer id, producer epoch, base sequence, batch bytes.
-- Returns {log start offset, last sequence number given, leader epoch, base offset per
-- batch}, or an error reply naming the Kafka error (kafkaesque/errors.py); on error
-- nothing is written.
local meta, index, stats, gseq_key, producers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local txn_open, txn_ended = KEYS[7], KEYS[8]
local serial = tonumber(ARGV[6])
local prefix = ARGV[1]
local o, refused = page_to_append(meta, KEYS[6])
if not o then return refused end
local archiving = o.archiving
local now = tonumber(ARGV[3])
-- acks=all with replicas to wait for: refused NOT_ENOUGH_REPLICAS, nothing written, while
-- this server has fewer replicas in sync (online, heard from within 10 s), as Kafka
-- refuses before appending while the in-sync replicas are too few. Appended regardless,
-- every retry would be told NOT_ENOUGH_REPLICAS_AFTER_APPEND with its batch kept, and a
-- producer that gives up and bumps its epoch would write it again.
local wanted_replicas = tonumber(ARGV[7])
if wanted_replicas > 0 then
  local in_sync = 0
  local info = redis.call('INFO', 'replication')
  for lag in string.gmatch(info, 'slave%d+:[^\r\n]*state=online[^\r\n]*lag=(%d+)') do
    if tonumber(lag) <= 10 then in_sync = in_sync + 1 end
  end
  if in_sync < wanted_replicas then
    return redis.error_reply('NOT_ENOUGH_REPLICAS ' .. in_sync .. ' of ' .. wanted_replicas ..
      ' Redis replicas in sync')
  end
end
-- A broker that no longer leads the partition (another took it over, lead.lua) is
-- refused, so each append runs either before the move or not at all.
if ARGV[5] ~= '' and o.leader and o.leader ~= ARGV[5] then
  return redis.error_reply('NOT_LEADER_OR_FOLLOWER broker ' .. o.leader ..
    ' leads this partition')
end

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
for i = 8, #ARGV, 5 do
  n = n + 1
  local count, pid = tonumber(ARGV[i]), ARGV[i + 1]
  fresh[n] = true
  -- Only end_txn.lua writes transaction markers; a transaction needs a producer id.
  if is_control(ARGV[i + 4]) then
    return redis.error_reply('INVALID_RECORD control batches are written by the broker only')
  end
  if pid == '-1' and is_transactional(ARGV[i + 4]) then
    return redis.error_reply('INVALID_RECORD a transactional batch needs a producer id')
  end
  -- A batch of a transaction whose marker is already here (the client timed the request
  -- out and ended the transaction while it was on its way) would open a transaction no
  -- marker ends, or slip into the producer's next one.
  if serial and is_transactional(ARGV[i + 4]) then
    local ended = tonumber(redis.call('HGET', txn_ended, pid) or -1)
    if ended >= serial then
      return redis.error_reply('INVALID_TXN_STATE transaction ' .. serial .. ' of producer '
        .. pid .. ' has ended on this partition')
    end
  end
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
for i = 8, #ARGV, 5 do total = total + tonumber(ARGV[i]) end
local gseq = next_sequence(gseq_key, total, tonumber(ARGV[4]))
local last_sequence = gseq + total - 1

n = 0
for i = 8, #ARGV, 5 do
  n = n + 1
  local count, batch = tonumber(ARGV[i]), ARGV[i + 4]
  if fresh[n] then
    bases[n] = append_batch(o, meta, index, stats, prefix, archiving, batch, count, gseq, now)
    gseq = gseq + count
    -- Transactional: the producer's first batch here opens its transaction (one HGET
    -- per transactional batch; other batches pay nothing).
    if is_transactional(batch) and redis.call('HEXISTS', txn_open, ARGV[i + 1]) == 0 then
      redis.call('HSET', txn_open, ARGV[i + 1], bases[n])
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
    redis.call('HDEL', txn_ended, unpack(expired))
    redis.call('ZREM', seen, unpack(expired))
  end
end

local start = finish_append(o, meta, index, stats, prefix, archiving)
if o.appended > 0 then publish_append(ARGV[2], prefix, o.next_offset) end
table.insert(bases, 1, o.leader_epoch)
table.insert(bases, 1, last_sequence)
table.insert(bases, 1, start)
return bases
