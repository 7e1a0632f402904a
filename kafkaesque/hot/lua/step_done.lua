-- A step-wise operation finished (kafkaesque/hot/log_steps.py): drop its marker, unless another
-- operation replaced it meanwhile (a newer config version, a topic created again).
-- KEYS[1] the marker, KEYS[2] steps (sorted set of markers)
-- ARGV[1] the marker's value as the finisher knew it
-- Returns 1 if dropped.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('ZREM', KEYS[2], KEYS[1]) end
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], KEYS[1])
return 1
