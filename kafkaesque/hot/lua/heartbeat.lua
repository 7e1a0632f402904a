-- A registered broker is still alive. KEYS as brokers.lua; ARGV[1] node id, ARGV[2] its
-- token, ARGV[3] session timeout (ms), ARGV[4] the membership channel, ARGV[5] the highest
-- record sequence number its appends were given.
-- Expires every broker past its deadline first; refuses UNKNOWN_SESSION when this
-- broker's entry is gone or another process' (it was expired, or Redis lost it): the
-- broker registers again. Returns members() (brokers.lua).
local now = now_ms()
expire_brokers(now, ARGV[4])
local held = redis.call('HGET', KEYS[1], ARGV[1])
if not held or token_and_address(held) ~= ARGV[2] then
  return redis.error_reply('UNKNOWN_SESSION broker ' .. ARGV[1] .. ' is not registered')
end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
report_sequence(tonumber(ARGV[5]))
return members(now)
