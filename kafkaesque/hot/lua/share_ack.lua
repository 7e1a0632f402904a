-- Acknowledge a member's records: ACCEPT (1) and REJECT (3) end them (ACKNOWLEDGED,
-- ARCHIVED), GAP (0, an offset with no record) archives it, RELEASE (2) makes it
-- AVAILABLE again (ARCHIVED at the delivery limit), RENEW (4) extends its lock. Every
-- offset must be ACQUIRED by `member`; otherwise nothing changes and the reply names
-- Kafka's error: 121 INVALID_RECORD_STATE, 42 INVALID_REQUEST (a bad type, or offsets
-- past what was ever fetched).
-- KEYS: state, records, locks (share_common.lua). ARGV: member, now, lock duration ms,
-- max delivery count, renew allowed (1/0), then (first, last, types) per batch, types
-- comma-separated: one for the whole batch, or one per offset.
-- Returns {0, records released} or {error code, message}.
local member, now, lock_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local max_delivery, renew_allowed = tonumber(ARGV[4]), ARGV[5] == '1'
local state_key, records_key, locks_key = KEYS[1], KEYS[2], KEYS[3]
local INVALID_REQUEST, INVALID_RECORD_STATE = 42, 121

local sp = load(state_key)
if not sp then return {INVALID_RECORD_STATE, 'no records were acquired here'} end

-- Check everything first: a refused acknowledgement changes nothing.
local batches = {}
for i = 6, #ARGV, 3 do
  local first, last = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  local types = {}
  for t in string.gmatch(ARGV[i + 2], '[^,]+') do
    local n = tonumber(t)
    if n == nil or n < 0 or n > 4 or (n == 4 and not renew_allowed) then
      return {INVALID_REQUEST, 'invalid acknowledge type ' .. t}
    end
    types[#types + 1] = n
  end
  if last < first or (#types ~= 1 and #types ~= last - first + 1) then
    return {INVALID_REQUEST, string.format('invalid acknowledgement batch %d-%d', first, last)}
  end
  if last >= sp.speo then
    return {INVALID_REQUEST, string.format(
      'offsets %d-%d are past the acquired records (end %d)', first, last, sp.speo)}
  end
  local from = math.max(first, sp.spso)
  local values, names = read_range(records_key, from, last)
  for offset = from, last do
    local value = values[offset]
    local owner = value and holder(value)
    if not owner then
      return {INVALID_RECORD_STATE, string.format('offset %d is not acquired', offset)}
    end
    if owner ~= member then
      return {INVALID_RECORD_STATE, string.format('offset %d is acquired by another member', offset)}
    end
  end
  batches[#batches + 1] = {first, from, last, types, values, names}
end

local released, done, changed = 0, {}, {}
local deadline = now + lock_ms
local totals = {0, 0, 0, 0, 0}  -- by type + 1: gap, accepted, released, rejected, renewed
for _, batch in ipairs(batches) do
  local first, from, last, types, values = batch[1], batch[2], batch[3], batch[4], batch[5]
  local names = batch[6]
  local renewed = false
  for offset = from, last do
    local t = types[1]
    if #types > 1 then t = types[offset - first + 1] end
    local times = 0  -- deliveries so far: only a release or a renewal needs them
    if t == 2 or t == 4 then times = tonumber(string.match(values[offset], '^q(%d+)')) end
    totals[t + 1] = totals[t + 1] + 1
    if t == 4 then
      changed[#changed + 1] = names[offset]
      changed[#changed + 1] = acquired_value(times, deadline, member)
      renewed = true
    elseif t == 2 and times < max_delivery then
      changed[#changed + 1] = names[offset]
      changed[#changed + 1] = 'a' .. times
      sp.acq, sp.avail = sp.acq - 1, sp.avail + 1
      released = released + 1
    else
      -- Accepted, rejected, a gap, or released at the delivery limit: done.
      done[#done + 1] = names[offset]
      sp.acq = sp.acq - 1
      if t == 2 then count(sp, 'archived', 1) end
    end
  end
  if renewed then
    redis.call('ZADD', locks_key, deadline, string.format('%d-%d', from, last))
  end
end
write_many(records_key, changed)
delete_many(records_key, done)
count(sp, 'accepted', totals[2])
count(sp, 'released', totals[3])
count(sp, 'rejected', totals[4] + totals[1])
advance(sp, records_key)
save(state_key, sp)
return {0, released}
