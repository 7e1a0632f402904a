-- Switch archiving on for one partition: set its meta's `archiving` field and take back
-- the TTL of every closed page not yet archived (closed before the field was set), so none
-- of them can expire before the archiver has copied it. Pages closing later get no TTL
-- until archived. The caller sets the catalog's switch (kafkaesque/hot/archiving.py).
-- KEYS[1] meta hash, KEYS[2] page index zset
-- ARGV[1] key prefix
-- Returns the number of pages whose TTL was removed.
local prefix = ARGV[1]
local m = redis.call('HMGET', KEYS[1], 'page', 'archived')
if not m[1] then return 0 end  -- deleted meanwhile
redis.call('HSET', KEYS[1], 'archiving', 1)
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
