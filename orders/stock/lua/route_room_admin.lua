-- The operator changes a route room live (routeroom.go): its method, its
-- rate per minute or its cap (-1: back to the config's), then reads it.
-- KEYS: 1 sk:room:{r}:st, 2 sk:room:{r}:q, 3 sk:room:{r}:act
-- ARGV: 1 now ms, 2 method ("" keeps it, "-" back to the config's), 3 rate ("" keeps, -1 clears),
-- 4 cap (as rate), 5 the keys' lifetime ms, 6 a lottery key (hex) for the
-- draw if it has none ("": none drawn), 7 "1": the draw is over, its key
-- is revealed (lkey moves to lprev)
-- Returns {method or "", rate or "", cap or "", waiting, active, joined,
-- admitted, abandoned, ended, over, lkey or "", lprev or ""}.
local now = tonumber(ARGV[1])
if ARGV[2] == '-' then
  redis.call('HDEL', KEYS[1], 'method')
elseif ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'method', ARGV[2])
end
for i, f in ipairs({'rate', 'cap'}) do
  local v = ARGV[2 + i]
  if v == '-1' then
    redis.call('HDEL', KEYS[1], f)
  elseif v ~= '' then
    redis.call('HSET', KEYS[1], f, v)
  end
end
-- The lottery: the first edge's key is the draw's (every edge reads it
-- back); at the draw's end it is revealed, and the next draw gets a new one.
local changed = ARGV[2] ~= '' or ARGV[3] ~= '' or ARGV[4] ~= ''
if ARGV[6] ~= '' and redis.call('HSETNX', KEYS[1], 'lkey', ARGV[6]) == 1 then
  changed = true
end
if ARGV[7] == '1' then
  local k = redis.call('HGET', KEYS[1], 'lkey')
  if k then
    redis.call('HSET', KEYS[1], 'lprev', k)
    redis.call('HDEL', KEYS[1], 'lkey')
    changed = true
  end
end
if changed then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[5]))
end
local st = redis.call('HMGET', KEYS[1], 'method', 'rate', 'cap', 'joined', 'admitted', 'abandoned', 'ended', 'over', 'lkey', 'lprev')
return {st[1] or '', st[2] or '', st[3] or '', redis.call('ZCARD', KEYS[2]),
  redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf'),
  tonumber(st[4] or '0'), tonumber(st[5] or '0'), tonumber(st[6] or '0'), tonumber(st[7] or '0'), tonumber(st[8] or '0'),
  st[9] or '', st[10] or ''}
