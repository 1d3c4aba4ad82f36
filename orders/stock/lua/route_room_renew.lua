-- An admitted visitor's pass is due for its check (routeroom.go): is the
-- session still running (not ended by the origin, not expired), and with
-- renewal, it runs one session from now.
-- KEYS: 1 sk:room:{r}:act, 2 sk:room:{r}:st
-- ARGV: 1 now ms, 2 visitor id, 3 the new session end (0: no renewal),
-- 4 the keys' lifetime ms
-- Returns the session's end (0: it is over; the visitor queues again).
local now = tonumber(ARGV[1])
local u = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[2]) or '0')
if u <= now then
  return 0
end
local n = tonumber(ARGV[3])
if n > u then
  redis.call('ZADD', KEYS[1], 'XX', n, ARGV[2])
  u = n
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[4]))
return u
