-- After a failover of the Redis primary, a new leader epoch for one partition: the
-- promoted replica may lack records the old primary acknowledged, and their offsets will
-- be given to other records. As after a restore (restore.lua), the partition's epoch
-- history (epoch -> start offset, for OffsetForLeaderEpoch) records where the new epoch
-- starts, so clients with the old epoch are fenced and truncate (KIP-320).
-- meta.replid is the primary's master_replid the partition's epoch belongs to (a promotion
-- changes it): only a partition whose replid differs is bumped, so several brokers noticing
-- the same failover bump it once. ARGV[2] "1": a partition with no replid yet (created
-- before anyone watched) only records it.
-- KEYS[1] meta, KEYS[2] epochs; ARGV: the primary's master_replid, adopt (1 or 0)
-- Returns the new epoch, 0 when none was needed, -1 for a partition that does not exist.
local m = redis.call('HMGET', KEYS[1], 'end', 'epoch', 'replid')
if not m[1] then return -1 end
if m[3] == ARGV[1] then return 0 end
if not m[3] and ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'replid', ARGV[1])
  return 0
end
local epoch = tonumber(m[2] or 0) + 1
redis.call('HSET', KEYS[1], 'epoch', epoch, 'replid', ARGV[1])
redis.call('HSET', KEYS[2], epoch, m[1])
return epoch
