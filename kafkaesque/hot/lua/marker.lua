-- A transaction's COMMIT or ABORT marker on one partition, for end_txn.lua (one partition)
-- and txn_end.lua (every partition of a transaction and its coordinator state at once).
-- Append the marker (a control batch built by kafkaesque/records/build.py) as append.lua
-- appends a batch, close the transaction (the last stable offset moves past it) and, on
-- ABORT, record it in the aborted index. A producer with no open transaction here still
-- gets its marker, as in Kafka. The marker's epoch is checked against the producer's: an
-- older one is fenced, a newer one becomes the producer's, fencing the older epoch's
-- later data.
-- K[1] meta hash, K[2] page index zset, K[3] page stats hash, K[4] sequence counter or
-- slot hash (append.lua), K[5] producer state hash, K[6] recovery marker, K[7] open
-- transactions hash, K[8] aborted index zset, K[9] ended transactions hash
-- A[1] key prefix, A[2] notification channel, A[3] now (ms), A[4] producer id, A[5]
-- producer epoch, A[6] 1 commit / 0 abort, A[7] the marker batch, A[8] sequence floor
-- (append.lua), A[9] the transaction's serial number ('' for none): append.lua refuses
-- that transaction's batches from now on
-- Returns {log start, the marker's offset}, or an error reply; on error nothing is written.
local function write_marker(K, A)
  local meta, index, stats, gseq_key, producers = K[1], K[2], K[3], K[4], K[5]
  local txn_open, txn_aborted = K[7], K[8]
  local prefix, pid, pepoch = A[1], A[4], tonumber(A[5])
  local commit, batch = A[6] == '1', A[7]
  local o, refused = page_to_append(meta, K[6])
  if not o then return refused end
  local archiving = o.archiving
  local now = tonumber(A[3])

  -- The producer's state is "epoch first:last:offset ..." (append.lua).
  local raw = redis.call('HGET', producers, pid)
  local epoch = raw and tonumber(string.match(raw, '^(%d+)'))
  if epoch and pepoch < epoch then
    return redis.error_reply('INVALID_PRODUCER_EPOCH marker epoch ' .. pepoch
      .. ' is older than the producer epoch ' .. epoch)
  end
  -- Nothing is written above this line: a refusal leaves the partition as it was.
  if not epoch or pepoch > epoch then
    -- A new epoch starts at sequence 0: its batches sent before are no retries of it.
    redis.call('HSET', producers, pid, pepoch)
  end
  redis.call('ZADD', producers_seen_key(prefix), now, pid)

  local gseq = next_sequence(gseq_key, 1, tonumber(A[8]))
  local offset = append_batch(o, meta, index, stats, prefix, archiving, batch, 1, gseq, now)
  local serial = tonumber(A[9])
  if serial and serial > tonumber(redis.call('HGET', K[9], pid) or -1) then
    redis.call('HSET', K[9], pid, serial)
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
  publish_append(A[2], prefix, o.next_offset)
  return {start, offset}
end
