-- The registry as it stands, read-only (`kafkaesque brokers`). KEYS as brokers.lua.
-- Returns {now, node, value, session deadline, ...} of the brokers whose session runs,
-- by Redis' clock (a script's keys pin it to the registry's node on a cluster).
local now = now_ms()
local reply = {now}
local alive = redis.call('ZRANGEBYSCORE', KEYS[2], now, '+inf', 'WITHSCORES')
for i = 1, #alive, 2 do
  local value = redis.call('HGET', KEYS[1], alive[i])
  if value then
    reply[#reply + 1] = alive[i]
    reply[#reply + 1] = value
    reply[#reply + 1] = tonumber(alive[i + 1])
  end
end
return reply
