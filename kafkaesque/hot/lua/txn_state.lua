-- A transactional id's coordinator state, compared and saved inside a script
-- (kafkaesque/hot/txn_states.py: txn_save.lua, txn_end.lua), for the transitions that need
-- no lock: the lock-holding path (TxnStates.locked) bumps `version` on every save too.
-- S[1] state hash, S[2] its lock, S[3] the set of ids, S[4] the due sorted set.

-- The fields compared with what the state was read as (R: ARGV[1..7]): the version, and
-- for a state saved by a broker that keeps none, those every transition changes.
local READ_AS = {'version', 'producer_id', 'producer_epoch', 'state', 'updated_ms',
  'partitions', 'groups'}

-- Why the state read as R may not be written now: 'busy' while a broker holds the id's
-- lock (a transition under way), 'changed' once another saved it (or the id was
-- forgotten); nil when unchanged.
local function txn_state_refusal(S, R)
  if redis.call('EXISTS', S[2]) == 1 then return 'busy' end
  local now = redis.call('HMGET', S[1], unpack(READ_AS))
  if tonumber(now[1] or 0) ~= tonumber(R[1]) then return 'changed' end
  for i = 2, #READ_AS do
    if now[i] ~= R[i] then return 'changed' end
  end
  return nil
end

-- Save the state: `fields` (field, value, ...) from A[first] on, `count` of them; `deadline`
-- when the coordinator must act ('' for none); the id in the sets, the version bumped.
local function txn_state_save(S, transactional_id, deadline, A, first, count)
  redis.call('HSET', S[1], unpack(A, first, first + count - 1))
  redis.call('HINCRBY', S[1], 'version', 1)
  redis.call('SADD', S[3], transactional_id)
  if deadline == '' then
    redis.call('ZREM', S[4], transactional_id)
  else
    redis.call('ZADD', S[4], deadline, transactional_id)
  end
end
