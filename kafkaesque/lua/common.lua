-- Shared helpers, prepended to every script by kafkaesque.scripts.
-- Plain Lua 5.1 only: fakeredis' Lua has no struct, bit or cmsgpack.

-- Big-endian fixed-width integers; Lua numbers are doubles, exact below 2^53.
local function pack_uint(n, width)
  local bytes = {}
  for i = width, 1, -1 do
    bytes[i] = n % 256
    n = math.floor(n / 256)
  end
  return string.char(unpack(bytes))
end

local function unpack_uint(s, pos, width)
  local n = 0
  for i = pos, pos + width - 1 do
    n = n * 256 + string.byte(s, i)
  end
  return n
end

-- Each page has a companion string of 16 bytes per batch: base offset, global sequence.
local BATCH_INDEX_ENTRY = 16

local function page_key(prefix, page) return prefix .. 'page:' .. page end
local function batch_index_key(prefix, page) return prefix .. 'bidx:' .. page end

-- Drop index entries (and data) of closed pages beyond max_pages and of pages whose TTL
-- expired, oldest first. Returns the log start offset: the first offset still held.
local function trim_index(index, stats, prefix, open_page, closed, max_pages, end_offset)
  while true do
    local oldest = redis.call('ZRANGE', index, 0, 0, 'WITHSCORES')
    if #oldest == 0 then return end_offset end
    local page = oldest[1]
    if tonumber(page) == open_page then return tonumber(oldest[2]) end
    local over_limit = max_pages > 0 and closed > max_pages
    if not over_limit and redis.call('EXISTS', page_key(prefix, page)) == 1 then
      return tonumber(oldest[2])
    end
    redis.call('DEL', page_key(prefix, page), batch_index_key(prefix, page))
    redis.call('ZREM', index, page)
    redis.call('HDEL', stats, page)
    closed = closed - 1
  end
end
