-- A broker leaves gracefully. KEYS as brokers.lua; ARGV[1] node id, ARGV[2] its token,
-- ARGV[3] the membership channel. Only its own registration goes (a process with the same
-- id that took over keeps its own). Returns 1 if it went, else 0.
local held = redis.call('HGET', KEYS[1], ARGV[1])
if not held or token_and_address(held) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
membership_changed(ARGV[3])
return 1
