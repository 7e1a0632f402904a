-- Shared helpers, prepended to every script by kafkaesque.hot.scripts.
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

-- A partition's keys are its prefix "NS:{TOPIC:P}:" (kafkaesque/hot/keys.py, Keys.partition)
-- and these suffixes (keys.py's PARTITION lists every one); the prefix comes in ARGV.
local function page_key(prefix, page) return prefix .. 'page:' .. page end
local function batch_index_key(prefix, page) return prefix .. 'bidx:' .. page end
local function producers_seen_key(prefix) return prefix .. 'producers_seen' end
local function epochs_key(prefix) return prefix .. 'epochs' end

-- RecordBatch v2 header fields (1-based first byte, width), as kafkaesque/records/batch.py has
-- them: the base offset and partition leader epoch are rewritten on append.
local BASE_OFFSET, BASE_OFFSET_WIDTH = 1, 8
local LEADER_EPOCH, LEADER_EPOCH_WIDTH = 13, 4
local LAST_OFFSET_DELTA, LAST_OFFSET_DELTA_WIDTH = 24, 4
local MAX_TIMESTAMP, MAX_TIMESTAMP_WIDTH = 36, 8

-- A batch with its base offset and partition leader epoch (4 packed bytes) replaced. One
-- that already has them (kafkaesque/hot/offset_guess.py) is kept as sent: a new string the
-- size of the batch is a copy, and Valkey hashes every byte of it.
local function with_offset_and_epoch(batch, base_offset, epoch_bytes)
  local offset_bytes = pack_uint(base_offset, BASE_OFFSET_WIDTH)
  if string.sub(batch, BASE_OFFSET, BASE_OFFSET_WIDTH) == offset_bytes
      and string.sub(batch, LEADER_EPOCH, LEADER_EPOCH + LEADER_EPOCH_WIDTH - 1) == epoch_bytes then
    return batch
  end
  return offset_bytes
    .. string.sub(batch, BASE_OFFSET + BASE_OFFSET_WIDTH, LEADER_EPOCH - 1)
    .. epoch_bytes .. string.sub(batch, LEADER_EPOCH + LEADER_EPOCH_WIDTH)
end

-- The offsets a batch takes: lastOffsetDelta + 1.
local function offset_count(batch)
  return unpack_uint(batch, LAST_OFFSET_DELTA, LAST_OFFSET_DELTA_WIDTH) + 1
end

-- The page after the one whose first offset is `first`, and its first offset; nil for
-- the last page. Page numbers may skip pages the compactor emptied and removed, so the
-- next page is the next score, not the next number.
local function next_indexed(index, first)
  local entry = redis.call('ZRANGEBYSCORE', index, '(' .. string.format('%.0f', first), '+inf',
    'WITHSCORES', 'LIMIT', 0, 1)
  if #entry == 0 then return nil end
  return tonumber(entry[1]), tonumber(entry[2])
end

-- A batch's maxTimestamp (int64).
local function max_timestamp(batch)
  local n = unpack_uint(batch, MAX_TIMESTAMP, MAX_TIMESTAMP_WIDTH)
  if n >= 2 ^ 63 then n = n - 2 ^ 64 end
  return n
end

-- The largest batch maxTimestamp of a page, as a function of the page number: the stats
-- of a closed page, the meta hash of the open one; nil when unknown (a page closed before
-- it was kept), so the caller reads the page.
local function page_max_timestamps(meta, stats)
  local open = redis.call('HMGET', meta, 'page', 'page_max_ts')
  return function(page)
    if page == open[1] then return tonumber(open[2]) end
    local stat = redis.call('HGET', stats, page)
    return stat and tonumber(string.match(stat, '^%d+ %d+ (%-?%d+)'))
  end
end

-- visit(batch, last offset) for each batch of a page in order, read 64 at a time, until
-- visit returns true; returns whether it did.
local function each_batch(key, visit)
  local pos, chunk = 0, 64
  while true do
    local batches = redis.call('LRANGE', key, pos, pos + chunk - 1)
    for _, batch in ipairs(batches) do
      local last = unpack_uint(batch, BASE_OFFSET, BASE_OFFSET_WIDTH) + offset_count(batch) - 1
      if visit(batch, last) then return true end
    end
    if #batches < chunk then return false end
    pos = pos + chunk
  end
end

-- The bytes of a page as its stats have them (0 for the open page).
local function page_stat_bytes(stats, page)
  local stat = redis.call('HGET', stats, page)
  return stat and tonumber(string.match(stat, '^%d+ (%d+)')) or 0
end

-- Bytes held in closed pages: the meta counter, summed from the stats the first time (a
-- partition created before the counter was kept).
local function closed_bytes(meta, stats)
  local held = redis.call('HGET', meta, 'closed_bytes')
  if held then return tonumber(held) end
  local sum = 0
  for _, value in ipairs(redis.call('HVALS', stats)) do
    sum = sum + tonumber(string.match(value, '^%d+ (%d+)'))
  end
  redis.call('HSET', meta, 'closed_bytes', sum)
  return sum
end

-- Close the open page: it becomes immutable (but for the compactor's rewrites) and counts
-- towards max_pages and retention_bytes. It gets the TTL now, unless pages are archived, in
-- which case it gets it once archived (mark_archived).
-- Its stats are "records bytes max_timestamp" (the largest maxTimestamp of its batches,
-- for ListOffsets by time; absent when unknown, and the page is then scanned); the
-- compactor adds "cleaned_ms tombstones" (compact.lua).
local function close_page(meta, stats, prefix, page, page_records, page_bytes, ttl, archiving,
                          page_max_ts)
  local stat = page_records .. ' ' .. page_bytes
  if page_max_ts then stat = stat .. ' ' .. string.format('%.0f', page_max_ts) end
  closed_bytes(meta, stats)  -- summed first for a partition that predates the counter
  redis.call('HSET', stats, page, stat)
  redis.call('HINCRBY', meta, 'closed_bytes', page_bytes)
  if ttl > 0 and not archiving then
    redis.call('EXPIRE', page_key(prefix, page), ttl)
    redis.call('EXPIRE', batch_index_key(prefix, page), ttl)
  end
end

-- Remove a closed page: its data, index entry, stats and bytes. Returns its bytes.
local function drop_page(meta, index, stats, prefix, page)
  local bytes = page_stat_bytes(stats, page)
  redis.call('DEL', page_key(prefix, page), batch_index_key(prefix, page))
  redis.call('ZREM', index, page)
  redis.call('HDEL', stats, page)
  redis.call('HINCRBY', meta, 'closed_bytes', -bytes)
  return bytes
end

-- Retention: drop index entries (and data) of the oldest closed pages while the partition
-- holds more than max_pages closed pages or more than retention_bytes (with the open
-- page's open_bytes), of pages whose TTL expired, and of pages wholly below the floor
-- DeleteRecords set. With archiving on, only pages wholly below `archived` (the next offset
-- to archive) go for max_pages, retention_bytes or a release. Returns the log start offset.
-- limits: {max_pages =, retention_bytes =, open_bytes =, floor =, delete =} (meta fields;
-- delete: the topic's cleanup.policy has delete, true for topics older than the field).
local function trim_index(meta, index, stats, prefix, open_page, closed, limits, end_offset,
                          archived, archiving, release)
  local held = closed_bytes(meta, stats)  -- summed first for a partition older than it
  local floor = limits.floor or 0
  while true do
    -- The oldest page and the first offset of the one after it, in one call.
    local oldest = redis.call('ZRANGE', index, 0, 1, 'WITHSCORES')
    if #oldest == 0 then return math.max(end_offset, floor) end
    local page = oldest[1]
    if tonumber(page) == open_page then return math.max(tonumber(oldest[2]), floor) end
    local next_first = #oldest > 2 and tonumber(oldest[4]) or end_offset
    -- release: Redis is short of memory, so every archived closed page goes now (the
    -- archive serves its offsets); never an unarchived one (checked just below).
    -- max_pages bounds memory: without the delete policy (compact) a page goes only once
    -- archived, since dropping it would lose the latest value of its keys.
    local over_limit = (limits.max_pages > 0 and closed > limits.max_pages
                        and (limits.delete or archiving))
      or (limits.retention_bytes >= 0 and held + limits.open_bytes > limits.retention_bytes)
      or (release and archiving)
    if over_limit and archiving and next_first > archived then over_limit = false end
    if next_first <= floor then over_limit = true end
    if not over_limit and redis.call('EXISTS', page_key(prefix, page)) == 1 then
      return math.max(tonumber(oldest[2]), floor)
    end
    held = held - drop_page(meta, index, stats, prefix, page)
    closed = closed - 1
  end
end

-- The meta fields through which the scripts enforce a topic's configs, from
-- "name value ..." (TopicConfig.lua_settings), as a flat list for HSET.
local function settings_list(text)
  local list = {}
  for word in string.gmatch(text, '%S+') do list[#list + 1] = word end
  return list
end

-- The limits trim_index enforces, from the meta fields max_pages, retention_bytes,
-- floor and delete (in that order, from m[first]).
local LIMIT_FIELDS = {'max_pages', 'retention_bytes', 'floor', 'delete'}
local function limits_of(m, first, open_bytes)
  return {max_pages = tonumber(m[first]), retention_bytes = tonumber(m[first + 1] or -1),
          open_bytes = open_bytes, floor = tonumber(m[first + 2] or 0),
          delete = m[first + 3] ~= '0'}
end

-- The limits trim_index enforces, from a meta hash.
local function meta_limits(meta, open_bytes)
  return limits_of(redis.call('HMGET', meta, unpack(LIMIT_FIELDS)), 1, open_bytes)
end

-- Fields every partition's meta hash starts with; `settings` as in settings_list.
-- With archiving on, a partition's meta has `archiving` 1 (archive_on.lua sets it, and
-- whoever creates a partition while the switch is on): its pages expire only once archived.
local function is_archiving(meta)
  return redis.call('HGET', meta, 'archiving') == '1'
end

-- The next `total` global sequence numbers (returns the first): on one Redis `seq_key` is
-- the counter string and `floor` 0; on a cluster it is the slot's hash, whose field `seq`
-- goes to max(seq + total, floor + total - 1) (a hybrid logical clock, docs/scale-out.md 3).
local function next_sequence(seq_key, total, floor)
  if floor == 0 then return redis.call('INCRBY', seq_key, total) - total + 1 end
  local last = math.max(tonumber(redis.call('HGET', seq_key, 'seq') or 0), floor - 1) + total
  redis.call('HSET', seq_key, 'seq', string.format('%.0f', last))
  return last - total + 1
end

local function init_partition(meta, log_end, epoch, page, settings)
  redis.call('HSET', meta,
    'end', log_end, 'start', log_end, 'epoch', epoch, 'archived', log_end,
    'page', page, 'page_records', 0, 'page_bytes', 0, 'page_opened', 0, 'bytes', 0,
    'expiry_page', page, 'closed_bytes', 0, unpack(settings_list(settings)))
end

-- Transactions (kafkaesque/hot/keys.py names them): the open ones, producer id -> the offset
-- of its first transactional record; the aborted ones, "pid:first:last" scored by last
-- (the ABORT marker's offset); the ended ones, producer id -> the serial number of its last
-- transaction whose marker is written here.
local function txn_open_key(prefix) return prefix .. 'txn_open' end
local function txn_aborted_key(prefix) return prefix .. 'txn_aborted' end
local function txn_ended_key(prefix) return prefix .. 'txn_ended' end

-- Delete every key of one partition.
local function delete_partition(meta, index, stats, producers, prefix)
  local open_page = redis.call('HGET', meta, 'page')
  for _, page in ipairs(redis.call('ZRANGE', index, 0, -1)) do
    redis.call('DEL', page_key(prefix, page), batch_index_key(prefix, page))
  end
  if open_page then
    redis.call('DEL', page_key(prefix, open_page), batch_index_key(prefix, open_page))
  end
  redis.call('DEL', meta, index, stats, producers, producers_seen_key(prefix),
    epochs_key(prefix), txn_open_key(prefix), txn_aborted_key(prefix),
    txn_ended_key(prefix))
end

-- Raise a slot's sequence counter (its hash's `seq`) to at least `floor`.
local function raise_sequence(slot_hash, floor)
  if floor > tonumber(redis.call('HGET', slot_hash, 'seq') or 0) then
    redis.call('HSET', slot_hash, 'seq', string.format('%.0f', floor))
  end
end

-- The attributes' low byte (byte 23 of a batch): bit 4 isTransactional, bit 5 isControl.
local ATTRIBUTES_LOW = 23
local function is_transactional(batch)
  return math.floor(string.byte(batch, ATTRIBUTES_LOW) / 16) % 2 == 1
end
local function is_control(batch)
  return math.floor(string.byte(batch, ATTRIBUTES_LOW) / 32) % 2 == 1
end

-- The open page of a partition as an append fills it: open_page reads it from meta (nil
-- for a partition that does not exist), append_batch writes batches into it, rolling
-- pages, and finish_append saves it and applies retention. append.lua and end_txn.lua
-- (transaction markers) share them, so both assign offsets and roll pages alike.
-- One HMGET reads every field an append needs: each command a script runs costs about as
-- much as the work it does for a small batch.
local function open_page(meta)
  local m = redis.call('HMGET', meta, 'end', 'page', 'page_records', 'page_bytes',
    'page_size', 'ttl', 'segment_bytes', 'epoch', 'archived', 'page_max_ts', 'segment_ms',
    'page_opened', 'archiving', 'leader', 'bytes', unpack(LIMIT_FIELDS))
  if not m[1] then return nil end
  return {
    leader = m[14], total_bytes = tonumber(m[15] or 0), meta_fields = m,
    next_offset = tonumber(m[1]), page = tonumber(m[2]),
    records = tonumber(m[3]), bytes = tonumber(m[4]),
    page_size = tonumber(m[5]), ttl = tonumber(m[6]),
    -- segment.bytes and segment.ms close a page too (absent for topics older than them).
    segment_bytes = tonumber(m[7] or 0), segment_ms = tonumber(m[11] or 0),
    leader_epoch = tonumber(m[8]), epoch = pack_uint(tonumber(m[8]), 4),
    archived = tonumber(m[9]),
    -- The open page's largest maxTimestamp (nil: unknown, for a page opened before it was kept).
    max_ts = tonumber(m[10]),
    opened = m[12],
    archiving = m[13] == '1',
    appended = 0,
  }
end

-- The open page to append to, or nil and the error reply: Redis lost its data (the
-- recovery marker is gone: appending now could reuse offsets the archive already holds),
-- or the partition does not exist. append.lua and end_txn.lua.
local function page_to_append(meta, recovery_marker)
  if redis.call('EXISTS', recovery_marker) == 0 then
    return nil, redis.error_reply('NEEDS_RECOVERY Redis has lost its data')
  end
  local o = open_page(meta)
  if not o then
    return nil, redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic or partition')
  end
  return o
end

-- Append one batch of `count` offsets whose first record gets global sequence `gseq`:
-- RPUSH with baseOffset and partitionLeaderEpoch rewritten, its bidx entry, the page
-- opened (indexed) or closed as needed. Returns the batch's base offset.
local function append_batch(o, meta, index, stats, prefix, archiving, batch, count, gseq, now)
  local batch_max_ts = max_timestamp(batch)
  if o.records > 0 and o.segment_ms > 0 and now - tonumber(o.opened or now) >= o.segment_ms then
    close_page(meta, stats, prefix, o.page, o.records, o.bytes, o.ttl, archiving, o.max_ts)
    o.page, o.records, o.bytes = o.page + 1, 0, 0
  end
  if o.records == 0 then
    redis.call('ZADD', index, o.next_offset, o.page)
    o.opened = string.format('%.0f', now)
    redis.call('HSET', meta, 'page_opened', o.opened)
    o.max_ts = batch_max_ts
  elseif o.max_ts and batch_max_ts > o.max_ts then
    o.max_ts = batch_max_ts
  end
  local base = o.next_offset
  redis.call('RPUSH', page_key(prefix, o.page), with_offset_and_epoch(batch, base, o.epoch))
  redis.call('APPEND', batch_index_key(prefix, o.page), pack_uint(base, 8) .. pack_uint(gseq, 8))
  o.next_offset = base + count
  o.records, o.bytes = o.records + count, o.bytes + #batch
  o.appended = o.appended + #batch
  if o.records >= o.page_size or (o.segment_bytes > 0 and o.bytes >= o.segment_bytes) then
    close_page(meta, stats, prefix, o.page, o.records, o.bytes, o.ttl, archiving, o.max_ts)
    o.page, o.records, o.bytes = o.page + 1, 0, 0
  end
  return base
end

-- Save the open page's counters and the log end, then apply retention: drop the oldest
-- closed pages beyond max_pages or retention_bytes, and index entries of pages that
-- expired, so the index never grows without bound. Returns the log start.
local function finish_append(o, meta, index, stats, prefix, archiving)
  local limits = limits_of(o.meta_fields, 16, o.bytes)
  -- The closed pages are counted only for a max_pages to enforce.
  local closed = 0
  if limits.max_pages > 0 then
    closed = redis.call('ZCARD', index) - (o.records > 0 and 1 or 0)
  end
  local start = trim_index(meta, index, stats, prefix, o.page, closed, limits, o.next_offset,
    o.archived, archiving)
  -- trim_index reads none of these fields: they are written once, together.
  local fields = {'end', o.next_offset, 'page', o.page, 'page_records', o.records,
    'page_bytes', o.bytes, 'bytes', string.format('%.0f', o.total_bytes + o.appended),
    'start', start}
  if o.max_ts and o.records > 0 then
    fields[#fields + 1] = 'page_max_ts'
    fields[#fields + 1] = string.format('%.0f', o.max_ts)
  end
  redis.call('HSET', meta, unpack(fields))
  return start
end

-- The first offset of the oldest open transaction, else the log end (the last stable offset,
-- once raised to the log start: partition_read.lua).
local function last_stable(txn_open, log_end)
  local lso = log_end
  for _, first in ipairs(redis.call('HVALS', txn_open)) do
    lso = math.min(lso, tonumber(first))
  end
  return lso
end

-- Tell long-polling readers (kafkaesque/hot/notify.py) that the partition with this key prefix
-- ("NS:{TOPIC:P}:") now ends at ``log_end``: "P:LOG_END" on the topic's channel, so a
-- reader of many partitions reads again only the one that grew.
local function publish_append(channel, prefix, log_end)
  redis.call('PUBLISH', channel, string.match(prefix, ':(%d+)}:$') .. ':' .. log_end)
end

-- Why a topic cannot be created now (an error reply), or nil: Redis lost its data
-- (the recovery marker is gone), or the topic exists. create.lua and create_catalog.lua.
local function creation_refused(topics, config, recovery_marker, name)
  if redis.call('EXISTS', recovery_marker) == 0 then
    return redis.error_reply('NEEDS_RECOVERY Redis has lost its data')
  end
  if redis.call('SISMEMBER', topics, name) == 1 or redis.call('EXISTS', config) == 1 then
    return redis.error_reply('TOPIC_EXISTS topic already exists: ' .. name)
  end
  return nil
end

-- A topic config's compare-and-set: an error reply when the topic is gone or its config
-- is not ``expected`` any more, else nil. configure.lua and configure_catalog.lua.
local function config_changed(key, expected)
  local current = redis.call('GET', key)
  if not current then
    return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic')
  end
  if current ~= expected then
    return redis.error_reply('CONFLICT the topic changed meanwhile')
  end
  return nil
end
