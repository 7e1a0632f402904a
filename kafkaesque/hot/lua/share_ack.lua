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
  for offset = math.max(first, sp.spso), last do
    local value = redis.call('HGET', records_key, field(offset))
    local state, _, _, owner = 'done', 0, 0, ''
    if value then state, _, _, owner = parse(value) end
    if state ~= 'q' then
      return {INVALID_RECORD_STATE, string.format('offset %d is not acquired', offset)}
    end
    if owner ~= member then
      return {INVALID_RECORD_STATE, string.format('offset %d is acquired by another member', offset)}
    end
  end
  batches[#batches + 1] = {first, last, types}
end

local released = 0
local deadline = now + lock_ms
for _, batch in ipairs(batches) do
  local first, last, types = batch[1], batch[2], batch[3]
  local renewed = false
  for offset = math.max(first, sp.spso), last do
    local t = types[1]
    if #types > 1 then t = types[offset - first + 1] end
    local _, delivered = parse(redis.call('HGET', records_key, field(offset)))
    if t == 2 then
      release(sp, records_key, offset, delivered, max_delivery)
      count(sp, 'released', 1)
      released = released + 1
    elseif t == 4 then
      redis.call('HSET', records_key, field(offset), acquired_value(delivered, deadline, member))
      renewed = true
    else
      redis.call('HDEL', records_key, field(offset))
      sp.acq = sp.acq - 1
      if t == 1 then count(sp, 'accepted', 1) else count(sp, 'rejected', 1) end
    end
  end
  if renewed then
    redis.call('ZADD', locks_key, deadline, string.format('%d-%d', first, last))
  end
end
advance(sp, records_key)
save(state_key, sp)
return {0, released}
