-- Give a partition's closed pages the new TTL (seconds; 0: none): a page keeps the age it
-- had under the old one (counted from when it got it: closing, or archiving), a page
-- without one gets it whole; with archiving on, an unarchived page gets none (its TTL
-- comes once archived, see mark_archived.lua).
local function retime(meta, old_ttl, new_ttl, archiving)
  local prefix = string.sub(meta, 1, -5)  -- meta is PREFIX .. 'meta'
  local m = redis.call('HMGET', meta, 'page', 'archived', 'end')
  local open_page, archived = tonumber(m[1]), tonumber(m[2])
  local pages = redis.call('ZRANGE', prefix .. 'index', 0, -1, 'WITHSCORES')
  for i = 1, #pages, 2 do
    local page = tonumber(pages[i])
    if page ~= open_page then
      local following = tonumber(pages[i + 3] or m[3])
      local page_keys = {page_key(prefix, page), batch_index_key(prefix, page)}
      local left = redis.call('PTTL', page_keys[1])
      for _, key in ipairs(page_keys) do
        if new_ttl == 0 then
          if left > 0 then redis.call('PERSIST', key) end
        elseif left > 0 then
          redis.call('PEXPIRE', key, math.max(1, left + (new_ttl - old_ttl) * 1000))
        elseif left == -1 and (not archiving or following <= archived) then
          redis.call('EXPIRE', key, new_ttl)
        end
      end
    end
  end
end
