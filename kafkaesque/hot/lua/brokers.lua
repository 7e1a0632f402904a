-- Broker registry helpers, put in front of register.lua, heartbeat.lua and deregister.lua.
-- KEYS[1] brokers hash (node -> "token\naddress\n" .. entry), KEYS[2] session deadlines
-- (sorted set, ms of this Redis' clock), KEYS[3] membership counter, KEYS[4] the highest
-- record sequence number any broker reported (on a cluster: every broker's appends are
-- floored above it, so records appended a heartbeat apart through two brokers keep their
-- order, docs/scale-out.md 3.6). Liveness is judged
-- by one clock, Redis', never by the brokers'.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function token_and_address(value)
  return string.match(value, '^([^\n]*)\n([^\n]*)\n')
end

-- A join, leave or expiry: brokers recompute leadership when the number moved.
local function membership_changed(channel)
  local number = redis.call('INCR', KEYS[3])
  redis.call('PUBLISH', channel, number)
  return number
end

-- Forget every broker whose session deadline passed.
local function expire_brokers(now, channel)
  local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. now)
  for _, node in ipairs(dead) do
    redis.call('HDEL', KEYS[1], node)
    redis.call('ZREM', KEYS[2], node)
  end
  if #dead > 0 then membership_changed(channel) end
end

-- Raise the highest sequence number to this broker's, if above.
local function report_sequence(highest)
  if highest > tonumber(redis.call('GET', KEYS[4]) or '0') then
    redis.call('SET', KEYS[4], highest)
  end
end

-- {membership, now, highest sequence, node, value, node, value, ...} of the live brokers.
local function members(now)
  local reply = {tonumber(redis.call('GET', KEYS[3]) or '0'), now,
                 tonumber(redis.call('GET', KEYS[4]) or '0')}
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    reply[#reply + 1] = all[i]
    reply[#reply + 1] = all[i + 1]
  end
  return reply
end
