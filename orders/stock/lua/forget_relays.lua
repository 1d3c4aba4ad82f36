-- Removes the relay group's consumers that are dead: nothing pending, idle
-- (XINFO CONSUMERS "idle") at least the bound, and no heartbeat in the
-- relays hash within the bound. Checked and removed in one script, so no
-- consumer can take an entry between the check and XGROUP DELCONSUMER,
-- which would drop it from the pending list for good.
--
-- The heartbeat is needed because Redis 7.0 refreshes "idle" only when a
-- consumer is handed entries: a live relay on a quiet outbox reads nothing
-- and its idle time grows like a dead one's. An idle time the server does
-- not know (miniredis answers -1) leaves the heartbeat alone to decide.
--
-- KEYS[1] the outbox stream   KEYS[2] the relays hash (consumer -> unix ms)
-- ARGV[1] the group   ARGV[2] the caller's consumer   ARGV[3] the bound, ms
-- ARGV[4] now, unix ms
-- Returns the names of the consumers removed.
local bound, now = tonumber(ARGV[3]), tonumber(ARGV[4])
local beats = {}
local flat = redis.call('HGETALL', KEYS[2])
for i = 1, #flat, 2 do
  local at = tonumber(flat[i + 1]) or 0
  if now - at >= bound then
    redis.call('HDEL', KEYS[2], flat[i])
  else
    beats[flat[i]] = true
  end
end
local removed = {}
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  local name = f['name']
  local idle = tonumber(f['idle']) or -1
  if name ~= ARGV[2] and not beats[name] and tonumber(f['pending']) == 0 and (idle < 0 or idle >= bound) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
    removed[#removed + 1] = name
  end
end
return removed
