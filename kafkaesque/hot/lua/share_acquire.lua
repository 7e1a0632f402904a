-- Acquire records for a member from what a share fetch read: the AVAILABLE ones among
-- the in-flight records, and new ones past the end, whole batches at a time until
-- `max_records` (Kafka's batch-optimized acquisition), the in-flight window never past
-- `max_locks` records. Ranges of kind 0 (transaction markers; aborted transactions'
-- records under read_committed) are archived, never acquired.
-- With `strict` (ShareFetch v2's record_limit mode) no more than `max_records`, batches
-- split where they must.
-- KEYS: state, records, locks (share_common.lua). ARGV: member, now, lock duration ms,
-- max delivery count, max records, max record locks, strict (1/0), then (first, last,
-- kind) per batch read, in offset order. Returns the acquired runs: {first, last,
-- delivery count, ...}.
local member, now, lock_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local max_records, max_locks, strict = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == '1'
local state_key, records_key, locks_key = KEYS[1], KEYS[2], KEYS[3]
local deadline = now + lock_ms

local sp = load(state_key)
if not sp then return {} end  -- prepared, then deleted (DeleteShareGroupOffsets)
local runs, acquired, writes, archived = {}, 0, {}, {}
local held_by = string.sub(acquired_value(0, deadline, member), 3)  -- " deadline member"

local function take(offset, delivered)
  local n = #runs
  if n > 0 and runs[n - 1] == offset - 1 and runs[n] == delivered then
    runs[n - 1] = offset
  else
    runs[n + 1], runs[n + 2], runs[n + 3] = offset, offset, delivered
  end
  writes[#writes + 1] = field(offset)
  writes[#writes + 1] = 'q' .. delivered .. held_by  -- acquired_value's, made once
  sp.acq = sp.acq + 1
  acquired = acquired + 1
  if delivered > 1 then count(sp, 'redelivered', 1) end
end

local full = false
for i = 8, #ARGV, 3 do
  if acquired >= max_records or full then break end
  local first, last, kind = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), ARGV[i + 2] == '1'
  local from = math.max(first, sp.spso)
  -- In-flight offsets: only AVAILABLE ones are taken (one HMGET for them all).
  if from < sp.speo then
    local to = math.min(last, sp.speo - 1)
    local values = read_range(records_key, from, to)
    for offset = from, to do
      local value = values[offset]
      if strict and kind and acquired >= max_records then
        full = true
        break
      end
      if value and string.sub(value, 1, 1) == 'a' then
        sp.avail = sp.avail - 1
        if kind then
          take(offset, tonumber(string.sub(value, 2)) + 1)
        else
          archived[#archived + 1] = field(offset)
          count(sp, 'archived', 1)
        end
      end
    end
    from = to + 1
  end
  -- New offsets past the end.
  for offset = from, last do
    if full or (strict and kind and acquired >= max_records) then
      full = true
      break
    end
    if offset > sp.speo and sp.spso == sp.speo then
      sp.spso = offset  -- the log skips offsets (compaction): nothing in flight between
    end
    if offset - sp.spso >= max_locks then
      full = true
      break
    end
    if kind then take(offset, 1) else count(sp, 'archived', 1) end
    sp.speo = offset + 1
  end
end
write_many(records_key, writes)
delete_many(records_key, archived)
-- Runs end at batch boundaries here and there: one lock entry per run.
for i = 1, #runs, 3 do
  redis.call('ZADD', locks_key, deadline, string.format('%d-%d', runs[i], runs[i + 1]))
end
advance(sp, records_key)
save(state_key, sp)
return runs
