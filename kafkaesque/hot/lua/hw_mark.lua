-- The first step of raising high watermarks (kafkaesque/hot/high_watermark.py): note each
-- partition's log end with a write, so that a WAIT on this connection then covers every
-- record below it (WAIT counts the replication stream up to the connection's last write).
-- KEYS: partition meta hashes (on a cluster, of one slot)
-- Returns each partition's log end, -1 for one that does not exist.
local ends = {}
for i, meta in ipairs(KEYS) do
  local log_end = redis.call('HGET', meta, 'end')
  if log_end then
    redis.call('HSET', meta, 'hw_mark', log_end)
    ends[i] = tonumber(log_end)
  else
    ends[i] = -1
  end
end
return ends
