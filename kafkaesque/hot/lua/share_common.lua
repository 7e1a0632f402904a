-- Share-partition helpers (KIP-932), put in front of every share_*.lua script by
-- kafkaesque/hot/share_store.py. A share-partition has three keys (Keys.share_partition):
--   KEYS[1] state hash: spso (share-partition start offset), speo (the end: the next
--           offset never fetched yet), avail (records AVAILABLE again), acq (ACQUIRED
--           records), and running totals (accepted, released, rejected, archived,
--           redelivered, expired);
--   KEYS[2] records hash: offset -> the in-flight record's state, for offsets in
--           [spso, speo) that are not done: "a<count>" AVAILABLE (delivered count times),
--           "q<count> <deadline ms> <member id>" ACQUIRED. An offset in the window
--           without a field is done (ACKNOWLEDGED or ARCHIVED: Kafka's terminal states),
--           so acknowledged records cost no memory;
--   KEYS[3] locks sorted set: "first-last" acquisition ranges by their deadline (ms).
-- Plain Lua 5.1.

local function field(offset) return string.format('%d', offset) end

-- state, delivery count, deadline, member of a stored record.
local function parse(value)
  if string.sub(value, 1, 1) == 'a' then
    return 'a', tonumber(string.sub(value, 2)), 0, ''
  end
  local count, deadline, member = string.match(value, '^q(%d+) (%d+) (.*)$')
  return 'q', tonumber(count), tonumber(deadline), member
end

-- The member holding an ACQUIRED record's value, nil for an AVAILABLE one (cheaper than
-- parse: most acknowledgements need no more).
local function holder(value)
  if string.byte(value, 1) ~= 113 then return nil end  -- not 'q'
  local space = string.find(value, ' ', string.find(value, ' ', 2, true) + 1, true)
  return string.sub(value, space + 1)
end

local function acquired_value(count, deadline, member)
  return 'q' .. count .. ' ' .. string.format('%d', deadline) .. ' ' .. member
end

-- The share-partition's numbers, read once per script (one HMGET) and written back by
-- save() (one HSET).
local TOTALS = {'accepted', 'released', 'rejected', 'archived', 'redelivered', 'expired'}

local function load(state_key)
  local v = redis.call('HMGET', state_key, 'spso', 'speo', 'avail', 'acq', unpack(TOTALS))
  if not v[1] then return nil end
  local sp = {spso = tonumber(v[1]), speo = tonumber(v[2]), avail = tonumber(v[3] or 0),
              acq = tonumber(v[4] or 0), totals = {}}
  for i, name in ipairs(TOTALS) do sp.totals[name] = tonumber(v[4 + i] or 0) end
  return sp
end

local function count(sp, name, n) sp.totals[name] = (sp.totals[name] or 0) + n end

-- A record going back to the group (released, its lock expired, its member gone): AVAILABLE
-- again, or ARCHIVED once it was delivered group.share.delivery.count.limit times.
local function release(sp, records_key, offset, delivered, max_delivery)
  sp.acq = sp.acq - 1
  if delivered >= max_delivery then
    redis.call('HDEL', records_key, field(offset))
    count(sp, 'archived', 1)
  else
    redis.call('HSET', records_key, field(offset), 'a' .. delivered)
    sp.avail = sp.avail + 1
  end
end

-- Many fields per command, in chunks (Lua's unpack has a limit): one command per chunk
-- costs far less than one per record.
local CHUNK = 1000

-- The stored values of offsets first..last: a table offset -> value (false if absent),
-- and one offset -> its field name (made once: formatting a number costs as much as the
-- hash lookup).
local function read_range(records_key, first, last)
  local out, names = {}, {}
  local from = first
  while from <= last do
    local to = math.min(last, from + CHUNK - 1)
    local fields = {}
    for offset = from, to do
      local name = field(offset)
      fields[#fields + 1] = name
      names[offset] = name
    end
    local values = redis.call('HMGET', records_key, unpack(fields))
    for i = 1, #fields do out[from + i - 1] = values[i] end
    from = to + 1
  end
  return out, names
end

-- HSET of a flat list {field, value, ...}, HDEL of a list of fields, chunked.
local function write_many(records_key, pairs_list)
  for i = 1, #pairs_list, 2 * CHUNK do
    redis.call('HSET', records_key, unpack(pairs_list, i, math.min(#pairs_list, i + 2 * CHUNK - 1)))
  end
end

local function delete_many(records_key, fields)
  for i = 1, #fields, CHUNK do
    redis.call('HDEL', records_key, unpack(fields, i, math.min(#fields, i + CHUNK - 1)))
  end
end

-- The start moves over done offsets (no field) up to the first record still in flight,
-- looking at a growing run of offsets per command.
local function advance(sp, records_key)
  if redis.call('HLEN', records_key) == 0 then
    sp.spso = sp.speo
    return
  end
  local step = 8
  while sp.spso < sp.speo do
    local to = math.min(sp.speo - 1, sp.spso + step - 1)
    local values = read_range(records_key, sp.spso, to)
    for offset = sp.spso, to do
      if values[offset] then
        sp.spso = offset
        return
      end
    end
    sp.spso = to + 1
    step = math.min(step * 4, CHUNK)
  end
end

local function save(state_key, sp)
  local values = {'spso', field(sp.spso), 'speo', field(sp.speo), 'avail', sp.avail,
                  'acq', sp.acq}
  for _, name in ipairs(TOTALS) do
    values[#values + 1] = name
    values[#values + 1] = field(sp.totals[name] or 0)
  end
  redis.call('HSET', state_key, unpack(values))
end

-- Release every record whose acquisition lock expired by `now`.
local function expire_locks(sp, records_key, locks_key, now, max_delivery)
  local due = redis.call('ZRANGEBYSCORE', locks_key, '-inf', now)
  for _, range in ipairs(due) do
    redis.call('ZREM', locks_key, range)
    local first, last = string.match(range, '^(%d+)-(%d+)$')
    first, last = math.max(tonumber(first), sp.spso), math.min(tonumber(last), sp.speo - 1)
    for offset = first, last do
      local value = redis.call('HGET', records_key, field(offset))
      if value then
        local state, delivered, deadline = parse(value)
        if state == 'q' and deadline <= now then
          release(sp, records_key, offset, delivered, max_delivery)
          count(sp, 'expired', 1)
        end
      end
    end
  end
end
