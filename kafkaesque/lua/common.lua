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

-- A partition's keys are its prefix "NS:{TOPIC:P}:" (kafkaesque/keys.py, Keys.partition)
-- and these suffixes (keys.py's PARTITION lists every one); the prefix comes in ARGV.
local function page_key(prefix, page) return prefix .. 'page:' .. page end
local function batch_index_key(prefix, page) return prefix .. 'bidx:' .. page end
local function producers_seen_key(prefix) return prefix .. 'producers_seen' end
local function epochs_key(prefix) return prefix .. 'epochs' end

-- RecordBatch v2 header fields (1-based first byte, width), as kafkaesque/records.py has
-- them: the base offset and partition leader epoch are rewritten on append.
local BASE_OFFSET, BASE_OFFSET_WIDTH = 1, 8
local LEADER_EPOCH, LEADER_EPOCH_WIDTH = 13, 4
local LAST_OFFSET_DELTA, LAST_OFFSET_DELTA_WIDTH = 24, 4
local MAX_TIMESTAMP, MAX_TIMESTAMP_WIDTH = 36, 8

-- A batch with its base offset and partition leader epoch (4 packed bytes) replaced.
local function with_offset_and_epoch(batch, base_offset, epoch_bytes)
  return pack_uint(base_offset, BASE_OFFSET_WIDTH)
    .. string.sub(batch, BASE_OFFSET + BASE_OFFSET_WIDTH, LEADER_EPOCH - 1)
    .. epoch_bytes .. string.sub(batch, LEADER_EPOCH + LEADER_EPOCH_WIDTH)
end

-- The offsets a batch takes: lastOffsetDelta + 1.
local function offset_count(batch)
  return unpack_uint(batch, LAST_OFFSET_DELTA, LAST_OFFSET_DELTA_WIDTH) + 1
end

-- A batch's maxTimestamp (int64).
local function max_timestamp(batch)
  local n = unpack_uint(batch, MAX_TIMESTAMP, MAX_TIMESTAMP_WIDTH)
  if n >= 2 ^ 63 then n = n - 2 ^ 64 end
  return n
end

-- Close the open page: it becomes immutable and counts towards max_pages. It gets the TTL
-- now, unless pages are archived, in which case it gets it once archived (mark_archived).
-- Its stats are "records bytes max_timestamp" (the largest maxTimestamp of its batches,
-- for ListOffsets by time; absent when unknown, and the page is then scanned).
local function close_page(stats, prefix, page, page_records, page_bytes, ttl, archiving,
                          page_max_ts)
  local stat = page_records .. ' ' .. page_bytes
  if page_max_ts then stat = stat .. ' ' .. string.format('%.0f', page_max_ts) end
  redis.call('HSET', stats, page, stat)
  if ttl > 0 and not archiving then
    redis.call('EXPIRE', page_key(prefix, page), ttl)
    redis.call('EXPIRE', batch_index_key(prefix, page), ttl)
  end
end

-- Drop index entries (and data) of closed pages beyond max_pages and of pages whose TTL
-- expired, oldest first; with archiving on, only pages wholly below `archived` (the next
-- offset to archive) may be dropped. Returns the log start offset: the first offset held.
local function trim_index(index, stats, prefix, open_page, closed, max_pages, end_offset,
                          archived, archiving, release)
  while true do
    local oldest = redis.call('ZRANGE', index, 0, 0, 'WITHSCORES')
    if #oldest == 0 then return end_offset end
    local page = oldest[1]
    if tonumber(page) == open_page then return tonumber(oldest[2]) end
    -- release: Redis is short of memory, so every archived closed page goes now (the
    -- archive serves its offsets); never an unarchived one (checked just below).
    local over_limit = (max_pages > 0 and closed > max_pages) or (release and archiving)
    if over_limit and archiving then
      local following = redis.call('ZRANGE', index, 1, 1, 'WITHSCORES')
      local next_first = #following > 0 and tonumber(following[2]) or end_offset
      if next_first > archived then over_limit = false end
    end
    if not over_limit and redis.call('EXISTS', page_key(prefix, page)) == 1 then
      return tonumber(oldest[2])
    end
    redis.call('DEL', page_key(prefix, page), batch_index_key(prefix, page))
    redis.call('ZREM', index, page)
    redis.call('HDEL', stats, page)
    closed = closed - 1
  end
end

-- Fields every partition's meta hash starts with.
local function init_partition(meta, log_end, epoch, page, page_size, ttl, max_pages)
  redis.call('HSET', meta,
    'end', log_end, 'start', log_end, 'epoch', epoch, 'archived', log_end,
    'page', page, 'page_records', 0, 'page_bytes', 0, 'page_opened', 0, 'bytes', 0,
    'expiry_page', page,
    'page_size', page_size, 'ttl', ttl, 'max_pages', max_pages)
end
