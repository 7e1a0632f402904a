-- Save a transactional id's state if nobody changed it since it was read (txn_state.lua):
-- AddPartitionsToTxn and AddOffsetsToTxn without the id's lock.
-- KEYS[1] state hash, KEYS[2] its lock, KEYS[3] the set of ids, KEYS[4] the due set
-- ARGV[1..7] the state as read (txn_state.lua's READ_AS), ARGV[8] the id, ARGV[9]
-- deadline ('' for none), then the state's fields and values.
-- Returns 'ok', or 'busy' / 'changed' with nothing written.
local refusal = txn_state_refusal(KEYS, ARGV)
if refusal then return refusal end
txn_state_save(KEYS, ARGV[8], ARGV[9], ARGV, 10, #ARGV - 9)
return 'ok'
