-- A new producer id: the next value of the counter, but never below a floor taken from the
-- clock, so ids handed out after Redis lost its data are above every id handed out before,
-- even ids whose records never reached the archive (a reused id would collide with a
-- producer still running).
-- KEYS[1] producer id counter; ARGV[1] floor (milliseconds since the epoch * 1024)
local id = redis.call('INCR', KEYS[1])
if id < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  id = tonumber(ARGV[1])
end
return id
