-- EndTxn in one call on one Redis: a transaction's markers on every partition
-- (marker.lua) and its state, if nobody changed the state since it was read
-- (txn_state.lua). The same steps as the coordinator's locked path, in its order:
-- PrepareCommit or PrepareAbort saved first (a script that fails half-way keeps what it
-- wrote: the prepared state then has the coordinator write every marker again), the
-- markers, CompleteCommit or CompleteAbort saved.
-- KEYS[1..4] the state's keys (txn_state.lua), then 9 per partition (marker.lua's K).
-- ARGV[1..7] the state as read (txn_state.lua's READ_AS), ARGV[8] the id, ARGV[9] the
-- error names a partition may refuse its marker with and the transaction still complete
-- (space-separated), ARGV[10] the prepared state's deadline, ARGV[11] the number P of its
-- field and value arguments, ARGV[12..11+P] them, ARGV[12+P] the number C of the
-- completed state's, then them; then 9 per partition (marker.lua's A).
-- Returns {'busy'} or {'changed'} with nothing written; else {'done' (the state saved
-- complete) or 'prepared' (a partition refused otherwise: left prepared, for the
-- coordinator to finish later), then per partition {log start, offset} or the refusal's
-- message ("NAME text", as an error reply says it)}.
local S = {KEYS[1], KEYS[2], KEYS[3], KEYS[4]}
local refusal = txn_state_refusal(S, ARGV)
if refusal then return {refusal} end
local droppable = {}
for name in string.gmatch(ARGV[9], '%S+') do droppable[name] = true end
local prepared_count = tonumber(ARGV[11])
local completed_at = 12 + prepared_count
local completed_count = tonumber(ARGV[completed_at])
local markers_at = completed_at + completed_count + 1

txn_state_save(S, ARGV[8], ARGV[10], ARGV, 12, prepared_count)
local results, complete = {'done'}, true
local partition = 0
for a = markers_at, #ARGV, 9 do
  local k = 5 + partition * 9
  partition = partition + 1
  local reply = write_marker({unpack(KEYS, k, k + 8)}, {unpack(ARGV, a, a + 8)})
  if reply.err then
    results[#results + 1] = reply.err
    if not droppable[string.match(reply.err, '^(%S+)')] then complete = false end
  else
    results[#results + 1] = reply
  end
end
if complete then
  txn_state_save(S, ARGV[8], '', ARGV, completed_at + 1, completed_count)
else
  results[1] = 'prepared'
end
return results
