-- The last step of raising high watermarks (kafkaesque/hot/high_watermark.py): the WAIT after
-- hw_mark.lua saw enough replicas, so each partition's records below the end it noted are
-- on them; readers may see them now. A raise is announced as an append is, waking long
-- polls.
-- KEYS: partition meta hashes (as given to hw_mark.lua)
-- ARGV: per partition: the end hw_mark.lua returned, the topic's append channel
-- Returns how many high watermarks rose.
local raised = 0
for i, meta in ipairs(KEYS) do
  local noted = tonumber(ARGV[i * 2 - 1])
  local m = redis.call('HMGET', meta, 'end', 'hw')
  if m[1] and noted >= 0 then
    local hw = math.min(noted, tonumber(m[1]))
    if hw > tonumber(m[2] or -1) then
      redis.call('HSET', meta, 'hw', hw)
      publish_append(ARGV[i * 2], string.sub(meta, 1, -5), hw)
      raised = raised + 1
    end
  end
end
return raised
