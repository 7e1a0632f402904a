-- A member's share session closed or it left the group: every record it still holds
-- goes back to the group (AVAILABLE, or ARCHIVED at the delivery limit), at once rather
-- than when its lock expires.
-- KEYS: state, records, locks (share_common.lua). ARGV: member, max delivery count.
-- Returns the number of records released.
local member, max_delivery = ARGV[1], tonumber(ARGV[2])
local state_key, records_key = KEYS[1], KEYS[2]
local sp = load(state_key)
if not sp or sp.acq == 0 then return 0 end
local all = redis.call('HGETALL', records_key)
local released = 0
for i = 1, #all, 2 do
  local state, delivered, _, owner = parse(all[i + 1])
  if state == 'q' and owner == member then
    release(sp, records_key, tonumber(all[i]), delivered, max_delivery)
    released = released + 1
  end
end
advance(sp, records_key)
save(state_key, sp)
return released
