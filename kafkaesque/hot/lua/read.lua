-- Read whole batches of one partition from the batch holding ARGV[2] onwards (see
-- read_partition in partition_read.lua).
-- KEYS[1] meta hash, KEYS[2] page index zset, KEYS[3] open transactions hash,
-- KEYS[4] aborted transactions zset
-- ARGV: key prefix, offset, max_bytes, max_records, min_one (1: the first batch even when
-- it exceeds the limits), committed (1: READ_COMMITTED), capped (1: not past the high
-- watermark)
-- Returns read_partition's result, or an error reply for a partition that does not exist.
local result = read_partition(KEYS, ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4]), ARGV[5] == '1', ARGV[6] == '1', ARGV[7] == '1')
if not result then
  return redis.error_reply('UNKNOWN_TOPIC_OR_PARTITION no such topic or partition')
end
return result
