-- TxnOffsetCommit without the id's lock: offsets held pending on the transaction in its
-- group's hash, if nobody changed the transaction's state since it was read
-- (txn_state.lua), so no end of it (which settles the held offsets) came in between.
-- KEYS[1] state hash, KEYS[2] its lock, KEYS[3] the group's txnoffsets hash
-- ARGV[1..7] the state as read (txn_state.lua's READ_AS), then the fields and values to
-- hold (kafkaesque/hot/txn_offsets.py StagedOffsets.staging).
-- Returns 'ok', or 'busy' / 'changed' with nothing written.
local refusal = txn_state_refusal(KEYS, ARGV)
if refusal then return refusal end
if #ARGV > 7 then redis.call('HSET', KEYS[3], unpack(ARGV, 8, #ARGV)) end
return 'ok'
