-- The operator changes a route room live (routeroom.go): its method, its
-- rate per minute or its cap (-1: back to the config's), then reads it.
-- KEYS: 1 sk:room:{r}:st, 2 sk:room:{r}:q, 3 sk:room:{r}:act
-- ARGV: 1 now ms, 2 method ("" keeps it, "-" back to the config's), 3 rate ("" keeps, -1 clears),
-- 4 cap (as rate), 5 the keys' lifetime ms
-- Returns {method or "", rate or "", cap or "", waiting, active, joined,
-- admitted, abandoned, ended, over}.
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
if ARGV[2] ~= '' or ARGV[3] ~= '' or ARGV[4] ~= '' then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[5]))
end
local st = redis.call('HMGET', KEYS[1], 'method', 'rate', 'cap', 'joined', 'admitted', 'abandoned', 'ended', 'over')
return {st[1] or '', st[2] or '', st[3] or '', redis.call('ZCARD', KEYS[2]),
  redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf'),
  tonumber(st[4] or '0'), tonumber(st[5] or '0'), tonumber(st[6] or '0'), tonumber(st[7] or '0'), tonumber(st[8] or '0')}
