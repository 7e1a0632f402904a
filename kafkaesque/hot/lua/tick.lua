-- The archiver's tick on a Redis Cluster (docs/scale-out.md 3.5, step 1): raise the
-- catalog's sequence floor G to the clock of this server (never lower it) and return it.
-- KEYS[1] the sequence floor
-- ARGV[1] the clock's epoch (ms), ARGV[2] clock steps per ms (kafkaesque/hot/sequence.py)
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local clock = (now_ms - tonumber(ARGV[1])) * tonumber(ARGV[2])
local floor = math.max(tonumber(redis.call('GET', KEYS[1]) or 0), clock)
redis.call('SET', KEYS[1], string.format('%.0f', floor))
return floor
