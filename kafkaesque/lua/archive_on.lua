-- Switch archiving on for one partition: set the archiving flag and take back the TTL of
-- every closed page not yet archived (closed before the flag was set), so none of them can
-- expire before the archiver has copied it. Pages closing later get no TTL until archived.
-- The caller runs this for every partition in one MULTI/EXEC, so the whole switch is atomic.
-- KEYS[1] meta hash, KEYS[2] page index zset, KEYS[3] archiving flag
-- ARGV[1] key prefix, ARGV[2] flag value
-- Returns the number of pages whose TTL was removed.
local prefix = ARGV[1]
redis.call('SET', KEYS[3], ARGV[2])
local m = redis.call('HMGET', KEYS[1], 'page', 'archived')
if not m[1] then return 0 end  -- deleted meanwhile
local open_page, archived = tonumber(m[1]), tonumber(m[2] or 0)
-- The page holding the first unarchived offset, else the oldest page.
local found = redis.call('ZREVRANGEBYSCORE', KEYS[2], archived, '-inf', 'LIMIT', 0, 1)
if #found == 0 then found = redis.call('ZRANGE', KEYS[2], 0, 0) end
if #found == 0 then return 0 end
local persisted = 0
for page = tonumber(found[1]), open_page - 1 do
  persisted = persisted + redis.call('PERSIST', page_key(prefix, page))
  redis.call('PERSIST', batch_index_key(prefix, page))
end
return persisted
