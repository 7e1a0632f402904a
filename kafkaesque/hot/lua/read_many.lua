-- Read many partitions in one call, within one byte budget, in the order given: a Fetch's
-- partitions in one round trip (see read_partition in partition_read.lua).
-- KEYS: each partition's meta hash ("NS:{TOPIC:P}:meta"); its other keys share its prefix
-- and hash tag, so they are in its slot
-- ARGV[1] the budget of bytes across all partitions, ARGV[2] committed (1: READ_COMMITTED),
-- ARGV[3] min_one (1: the first batch read comes even when it exceeds the limits, KIP-74),
-- ARGV[4] capped (1: not past the high watermark), then per partition: offset, its own
-- max bytes
-- Returns per partition read_partition's result, or {-1} for one that does not exist.
local remaining, committed, min_one = tonumber(ARGV[1]), ARGV[2] == '1', ARGV[3] == '1'
local capped = ARGV[4] == '1'
local results, total = {}, 0
for i, meta in ipairs(KEYS) do
  local prefix = string.sub(meta, 1, -5)
  local keys = {meta, prefix .. 'index', txn_open_key(prefix), txn_aborted_key(prefix)}
  local limit = math.min(tonumber(ARGV[i * 2 + 4]), remaining)
  local result, bytes = read_partition(keys, prefix, tonumber(ARGV[i * 2 + 3]), limit,
    MAX_READ_RECORDS, min_one and total == 0, committed, capped)
  results[i] = result or {-1}
  total = total + bytes
  remaining = remaining - bytes
end
return results
