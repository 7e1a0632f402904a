-- Save a transactional id's state if nobody changed it since it was read (txn_state.lua):
-- AddPartitionsToTxn and AddOffsetsToTxn without the id's lock.
-- KEYS[1] state hash, KEYS[2] its lock, KEYS[3] the set of ids, KEYS[4] the due set
-- ARGV[1] version read, ARGV[2] producer id read, ARGV[3] its epoch, ARGV[4] the id,
-- ARGV[5] deadline ('' for none), then the state's fields and values.
-- Returns 'ok', or 'busy' / 'changed' with nothing written.
local refusal = txn_state_refusal(KEYS, ARGV[1], ARGV[2], ARGV[3])
if refusal then return refusal end
txn_state_save(KEYS, ARGV[4], ARGV[5], ARGV, 6, #ARGV - 5)
return 'ok'
