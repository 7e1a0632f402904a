-- Before a share fetch reads the log: create the share-partition at `init` if it has no
-- state yet (share.auto.offset.reset, computed by the caller), move its start past
-- offsets the log no longer has, release the records whose locks expired, and find
-- where to read: the first AVAILABLE record, else the end (-1: nothing may be acquired,
-- group.share.partition.max.record.locks are in flight).
-- KEYS: state, records, locks (share_common.lua), the group's set of share-partitions.
-- ARGV: now, max delivery count, max record locks, init offset (-1: the caller does not
-- know it yet), log start, log end, the share-partition's member of that set.
-- Returns {spso, speo, next fetch offset, earliest lock deadline or -1, acquired,
-- available, archived so far (rejected too)}; all -1 for a share-partition without state when no init
-- offset was given.
local now, max_delivery, max_locks = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local init, log_start, log_end = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local state_key, records_key, locks_key = KEYS[1], KEYS[2], KEYS[3]

local sp = load(state_key)
if not sp then
  if init < 0 then return {-1, -1, -1, -1, -1, -1, -1} end
  sp = {spso = init, speo = init, avail = 0, acq = 0, totals = {}}
  redis.call('SADD', KEYS[4], ARGV[7])
end
if sp.spso < log_start then
  -- Retention or DeleteRecords took these records: nobody can have them any more.
  for offset = sp.spso, math.min(sp.speo, log_start) - 1 do
    local value = redis.call('HGET', records_key, field(offset))
    if value then
      redis.call('HDEL', records_key, field(offset))
      if string.sub(value, 1, 1) == 'a' then sp.avail = sp.avail - 1 else sp.acq = sp.acq - 1 end
      count(sp, 'archived', 1)
    end
  end
  sp.spso = log_start
  if sp.speo < log_start then sp.speo = log_start end
end
if sp.speo > log_end and sp.spso <= log_end then
  -- The log was restored shorter (Redis lost records the archive never had): the
  -- offsets past its end will be new records.
  sp.speo = log_end
end
expire_locks(sp, records_key, locks_key, now, max_delivery)
advance(sp, records_key)
save(state_key, sp)

local next_offset = sp.speo
if sp.avail > 0 then
  for offset = sp.spso, sp.speo - 1 do
    local value = redis.call('HGET', records_key, field(offset))
    if value and string.sub(value, 1, 1) == 'a' then
      next_offset = offset
      break
    end
  end
elseif sp.speo - sp.spso >= max_locks then
  next_offset = -1
end
local first = redis.call('ZRANGE', locks_key, 0, 0, 'WITHSCORES')
local deadline = first[2] and tonumber(first[2]) or -1
local archived = (sp.totals['archived'] or 0) + (sp.totals['rejected'] or 0)
return {sp.spso, sp.speo, next_offset, deadline, sp.acq, sp.avail, archived}
