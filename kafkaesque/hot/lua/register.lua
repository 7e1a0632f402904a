-- A broker joins (or comes back). KEYS as brokers.lua; ARGV[1] node id, ARGV[2] the
-- process' token (random per start), ARGV[3] its address, ARGV[4] its entry (msgpack),
-- ARGV[5] session timeout (ms), ARGV[6] the membership channel.
-- Refuses DUPLICATE_BROKER_REGISTRATION while another live process at another address
-- holds the node id; the same address is the same broker restarted, which takes over.
-- Returns members() (brokers.lua).
local node, token, address = ARGV[1], ARGV[2], ARGV[3]
local now = now_ms()
expire_brokers(now, ARGV[6])
local held = redis.call('HGET', KEYS[1], node)
if held then
  local other_token, other_address = token_and_address(held)
  if other_token ~= token and other_address ~= address then
    return redis.error_reply('DUPLICATE_BROKER_REGISTRATION node id ' .. node ..
      ' is registered by a live broker at ' .. other_address)
  end
end
redis.call('HSET', KEYS[1], node, token .. '\n' .. address .. '\n' .. ARGV[4])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), node)
membership_changed(ARGV[6])
return members(now)
