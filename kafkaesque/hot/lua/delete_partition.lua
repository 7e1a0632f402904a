-- Delete one partition of a deleted topic (a step of a deletion on a Redis Cluster): every
-- key of it, only if its meta is of that topic (a topic created again under the name is
-- left alone).
-- KEYS[1] meta hash, KEYS[2] page index, KEYS[3] page stats, KEYS[4] producer state
-- ARGV[1] key prefix, ARGV[2] topic id (hex)
-- Returns 1 if deleted, 0 if it was not there or is another topic's.
local id = redis.call('HGET', KEYS[1], 'topic_id')
if id ~= ARGV[2] and (id or redis.call('EXISTS', KEYS[1]) == 0) then return 0 end
delete_partition(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1])
return 1
