-- End a producer's transaction on one partition: append its COMMIT or ABORT marker (a
-- control batch built by kafkaesque/records/build.py) as append.lua appends a batch, close
-- the transaction (the last stable offset moves past it) and, on ABORT, record it in the
-- aborted index. A producer with no open transaction here still gets its marker, as in
-- Kafka. The marker's epoch is checked against the producer's: an older one is fenced,
-- a newer one becomes the producer's, fencing the older epoch's later data.
-- KEYS[1] meta hash, KEYS[2] page index zset, KEYS[3] page stats hash,
-- KEYS[4] sequence counter or slot hash (append.lua), KEYS[5] producer state hash,
-- KEYS[6] recovery marker, KEYS[7] open transactions hash, KEYS[8] aborted index zset,
-- KEYS[9] ended transactions hash
-- ARGV[1] key prefix, ARGV[2] notification channel, ARGV[3] now (ms), ARGV[4] producer id,
-- ARGV[5] producer epoch, ARGV[6] 1 commit / 0 abort, ARGV[7] the marker batch,
-- ARGV[8] sequence floor (append.lua), ARGV[9] the transaction's serial number ('' for
-- none): append.lua refuses that transaction's batches from now on
-- Returns {log start, the marker's offset}, or an error reply; on error nothing is written.
local meta, index, stats, gseq_key, producers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local txn_open, txn_aborted = KEYS[7], KEYS[8]
local prefix, pid, pepoch = ARGV[1], ARGV[4], tonumber(ARGV[5])
local commit, batch = ARGV[6] == '1', ARGV[7]
local o, refused = page_to_append(meta, KEYS[6])
if not o then return refused end
local archiving = o.archiving
local now = tonumber(ARGV[3])

-- The producer's state is "epoch first:last:offset ..." (append.lua).
local raw = redis.call('HGET', producers, pid)
local epoch = raw and tonumber(string.match(raw, '^(%d+)'))
if epoch and pepoch < epoch then
  return redis.error_reply('INVALID_PRODUCER_EPOCH marker epoch ' .. pepoch
    .. ' is older than the producer epoch ' .. epoch)
end
if not epoch or pepoch > epoch then
  -- A new epoch starts at sequence 0: its batches sent before are no retries of it.
  redis.call('HSET', producers, pid, pepoch)
end
redis.call('ZADD', producers_seen_key(prefix), now, pid)

local gseq = next_sequence(gseq_key, 1, tonumber(ARGV[8]))
local offset = append_batch(o, meta, index, stats, prefix, archiving, batch, 1, gseq, now)
local serial = tonumber(ARGV[9])
if serial and serial > tonumber(redis.call('HGET', KEYS[9], pid) or -1) then
  redis.call('HSET', KEYS[9], pid, serial)
end
local first = redis.call('HGET', txn_open, pid)
if first then
  redis.call('HDEL', txn_open, pid)
  if not commit then
    redis.call('ZADD', txn_aborted, offset, pid .. ':' .. first .. ':' .. offset)
  end
end
local start = finish_append(o, meta, index, stats, prefix, archiving)
-- Aborted transactions wholly below the log start concern no reader any more.
redis.call('ZREMRANGEBYSCORE', txn_aborted, '-inf', '(' .. string.format('%.0f', start))
publish_append(ARGV[2], prefix, o.next_offset)
return {start, offset}
