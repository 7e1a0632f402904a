-- Move a partition's leadership, compare-and-set. KEYS[1] meta hash, KEYS[2] epochs hash;
-- ARGV[1] the leader the caller saw ('' when none was set), ARGV[2] the new leader.
-- A partition that had a leader gets a new leader epoch starting at its log end, so
-- clients holding the old one are fenced (KIP-320) and appends of the old leader refused
-- (append.lua); a first leader is not a move: every broker served it as that one.
-- Returns {1, leader, epoch} when set, {0, actual leader, epoch} when ARGV[1] was not
-- the leader any more, {-1} when the partition does not exist.
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local current = redis.call('HGET', KEYS[1], 'leader') or ''
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
if current ~= ARGV[1] then return {0, current, epoch} end
if current == ARGV[2] then return {1, current, epoch} end
if current ~= '' then
  epoch = epoch + 1
  redis.call('HSET', KEYS[1], 'epoch', epoch)
  redis.call('HSET', KEYS[2], epoch, tonumber(redis.call('HGET', KEYS[1], 'end') or '0'))
end
redis.call('HSET', KEYS[1], 'leader', ARGV[2])
return {1, ARGV[2], epoch}
