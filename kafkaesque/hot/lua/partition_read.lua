-- Reading one partition, shared by read.lua (one partition) and read_many.lua (a fetch's
-- partitions in one call).
local READ_OK, READ_BELOW_START, READ_PAST_END, READ_DELETED = 0, 1, 2, 3
local READ_HEAD = 6 -- the fields before the batches in a read's result
local TAIL_ENTRIES = 8 -- batch index entries read at once from a page's end
local MAX_READ_RECORDS = 2147483647 -- no record limit

-- Whole batches of one partition from the batch holding ``offset`` onwards: keys = {meta
-- hash, page index zset, open transactions hash, aborted transactions zset}. ``min_one``:
-- the first batch comes even when it exceeds the limits, as Kafka answers the first
-- partition of a fetch (KIP-74). ``committed`` (READ_COMMITTED): only whole batches below
-- the last stable offset, and the aborted transactions overlapping them.
-- Returns {status, log start, log end, leader epoch, last stable offset,
-- {"pid:first:last" of aborted transactions}, batch...} and the bytes of the batches, or
-- nil for a partition that does not exist. Status READ_DELETED: the offset is below the
-- floor DeleteRecords set (deleted everywhere: no use asking the archive).
-- ``capped`` (Redis replicas are required): nothing at or past the partition's high
-- watermark ('hw', raised by hw_raise.lua once replicas have the records) is read, and
-- the log end answered is the high watermark, as Kafka's leader answers: a record only
-- the primary has may vanish in a failover, so no reader sees it before a replica has it.
-- Offsets up to the true log end are in range (read as nothing yet).
local function read_partition(keys, prefix, offset, max_bytes, max_records, min_one, committed,
    capped)
  local m = redis.call('HMGET', keys[1], 'end', 'epoch', 'floor', 'page', 'hw')
  if not m[1] then return nil, 0 end
  local log_end, epoch, open = tonumber(m[1]), tonumber(m[2]), tonumber(m[4])
  local aborted = {}

  -- The log start is the first indexed page whose data still exists (TTL may have removed
  -- older ones before the next append trims their index entries), or DeleteRecords' floor.
  local start, rank = log_end, 0
  while true do
    local entry = redis.call('ZRANGE', keys[2], rank, rank, 'WITHSCORES')
    if #entry == 0 then break end
    if redis.call('EXISTS', page_key(prefix, entry[1])) == 1 then
      start = tonumber(entry[2])
      break
    end
    rank = rank + 1
  end
  local floor = tonumber(m[3] or 0)
  start = math.max(start, floor)
  -- The end readers see: the high watermark when capped. What lies below the log start
  -- was archived (replicated first: the archive's barrier) or deleted, so never less.
  local visible = log_end
  if capped then visible = math.max(math.min(log_end, tonumber(m[5] or 0)), start) end
  -- A transaction whose start was deleted (DeleteRecords, retention) holds back no reader
  -- below the log start, as in Kafka; and the last stable offset is never past the
  -- high watermark.
  local lso = math.min(math.max(last_stable(keys[3], log_end), start), visible)
  -- Under READ_COMMITTED nothing at or past the last stable offset is read.
  local limit = committed and lso or visible
  if offset < floor then return {READ_DELETED, start, visible, epoch, lso, aborted}, 0 end
  if offset < start then return {READ_BELOW_START, start, visible, epoch, lso, aborted}, 0 end
  if offset > log_end then return {READ_PAST_END, start, visible, epoch, lso, aborted}, 0 end
  local result = {READ_OK, start, visible, epoch, lso, aborted}
  if offset >= limit or (max_bytes <= 0 and not min_one) then return result, 0 end

  local bytes, records = 0, 0
  -- Every batch ends at or below the log end, so without a last stable offset below it
  -- (READ_COMMITTED) or a record limit, a batch past the first needs no look inside.
  local whole = limit == log_end and max_records >= MAX_READ_RECORDS
  -- The aborted transactions a READ_COMMITTED reader of the batches read needs to drop
  -- their records: those ending at or after the first batch and starting before the end.
  local function done()
    if not committed or #result == READ_HEAD then return result, bytes end
    local low = unpack_uint(result[READ_HEAD + 1], BASE_OFFSET, BASE_OFFSET_WIDTH)
    local last = result[#result]
    local high = unpack_uint(last, BASE_OFFSET, BASE_OFFSET_WIDTH) + offset_count(last)
    for _, entry in ipairs(redis.call('ZRANGEBYSCORE', keys[4], low, '+inf')) do
      local first = tonumber(string.match(entry, '^%d+:(%d+):'))
      if first < high then aborted[#aborted + 1] = entry end
    end
    return result, bytes
  end

  local found = redis.call('ZREVRANGEBYSCORE', keys[2], offset, '-inf', 'LIMIT', 0, 1)
  local page = tonumber(found[1])
  -- The last batch of the page starting at or before offset, from the page's batch index.
  -- A consumer at the log's end reads one of the last batches: the last TAIL_ENTRIES
  -- entries come in one GETRANGE and are scanned, and only an offset before them is
  -- binary searched (a dozen GETRANGEs in a page of 4,096 batches).
  local bidx = batch_index_key(prefix, page)
  local count = redis.call('STRLEN', bidx) / BATCH_INDEX_ENTRY
  local lo, hi = 0, count - 1
  local tail_first = math.max(0, count - TAIL_ENTRIES)
  if tail_first > 0 then
    local tail = redis.call('GETRANGE', bidx, tail_first * BATCH_INDEX_ENTRY, -1)
    if unpack_uint(tail, 1, 8) <= offset then
      lo = tail_first
      for i = count - 1, tail_first + 1, -1 do
        if unpack_uint(tail, (i - tail_first) * BATCH_INDEX_ENTRY + 1, 8) <= offset then
          lo = i
          break
        end
      end
      hi = lo
    else
      hi = tail_first - 1
    end
  end
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    local base = unpack_uint(redis.call('GETRANGE', bidx, mid * BATCH_INDEX_ENTRY,
      mid * BATCH_INDEX_ENTRY + 7), 1, 8)
    if base <= offset then lo = mid else hi = mid - 1 end
  end

  -- Batches are read a chunk at a time, sized to what the budget still takes: a fixed 64
  -- copied 15 MB of large batches into Lua to answer a 1 MiB fetch, and a first chunk of
  -- 4 still copied 4 MB where one 1 MB batch was answered. The first is one batch; the
  -- next are sized by the bytes per batch seen.
  local pos, chunk = lo, 1
  -- The batches in the page being read, while known (the first page's, from its index).
  local in_page = count
  while true do
    -- The open page is the last: read to its end, the read is done.
    if pos >= in_page and page == open then return done() end
    -- A closed page of one batch (large batches fill a page each) has its size in the
    -- stats: one that would not fit is not copied into Lua only to be left out (a 1 MB
    -- batch read and dropped doubled the cost of a 1 MiB fetch).
    if pos == 0 and #result > READ_HEAD
        and redis.call('STRLEN', batch_index_key(prefix, page)) == BATCH_INDEX_ENTRY
        and bytes + page_stat_bytes(prefix .. 'stats', page) > max_bytes then
      return done()
    end
    local batches = redis.call('LRANGE', page_key(prefix, page), pos, pos + chunk - 1)
    local read_bytes = 0
    for _, batch in ipairs(batches) do
      read_bytes = read_bytes + #batch
      if whole and #result > READ_HEAD then
        -- Past the first batch, only the budget decides (no header is unpacked).
        if bytes + #batch > max_bytes then return done() end
        result[#result + 1] = batch
        bytes = bytes + #batch
      else
        -- The batch found may end before the offset when the compactor removed the batches
        -- after it: skip it, or a reader with a small budget would get it again and again.
        local batch_end = unpack_uint(batch, BASE_OFFSET, BASE_OFFSET_WIDTH) + offset_count(batch)
        if #result > READ_HEAD or batch_end > offset then
          -- A batch across the last stable offset waits until its transaction ends.
          if batch_end > limit then return done() end
          local must = min_one and #result == READ_HEAD
          if not must and (bytes + #batch > max_bytes or records >= max_records) then
            return done()
          end
          result[#result + 1] = batch
          bytes = bytes + #batch
          records = records + offset_count(batch)
        end
      end
    end
    if #batches < chunk then
      if page == open then return done() end
      -- The next page (numbers may skip pages the compactor emptied and removed).
      page = next_indexed(keys[2], tonumber(redis.call('ZSCORE', keys[2], page)))
      if not page then return done() end
      pos, in_page = 0, math.huge
    else
      pos = pos + chunk
    end
    if #batches > 0 then
      local wanted = math.ceil(math.max(max_bytes - bytes, 0) * #batches / read_bytes) + 1
      chunk = math.max(2, math.min(256, wanted))
    end
  end
end
