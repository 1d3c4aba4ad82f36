-- The origin ended a visitor's session (its end header): the seat frees at
-- once, and goes in the same call to the next in line as a reservation
-- (route_room_visit.lua's fill, the same lines), which they claim with
-- their next request.
-- KEYS: 1 sk:room:{r}:act, 2 sk:room:{r}:st, 3 sk:room:{r}:q, 4 sk:room:{r}:seen
-- ARGV: 1 visitor id, 2 now ms, 3 the configured admissions per minute,
-- 4 the configured max active, 5 abandon ms (a reservation's life),
-- 6 the method in force
-- Returns 1 if the session was running, 0 otherwise.
local now = tonumber(ARGV[2])
local n = redis.call('ZREM', KEYS[1], ARGV[1])
if n == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[2], 'ended', 1)
local lapsed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local st = redis.call('HMGET', KEYS[2], 'method', 'rate', 'cap', 'fr', 'frms', 'fr0')
-- Seats freed, decayed (time constant 20 s): the visit's estimate of a
-- capped place.
local fr = tonumber(st[4] or '0') * math.exp(-math.max(now - tonumber(st[5] or now), 0) / 20000) + 1 + lapsed
redis.call('HSET', KEYS[2], 'fr', tostring(fr), 'frms', now)
if not st[6] then redis.call('HSET', KEYS[2], 'fr0', now) end
local method = st[1] or ARGV[6]
local rate, cap = tonumber(st[2] or ARGV[3]), tonumber(st[3] or ARGV[4])
if cap > 0 and rate == 0 and (method == 'fifo' or method == 'random') then
  local free = cap - redis.call('ZCARD', KEYS[1])
  if free > 0 then
    local head = redis.call('ZRANGE', KEYS[3], 0, free - 1)
    for _, v in ipairs(head) do
      -- A reservation's score ends in .5: an admission not yet claimed.
      redis.call('ZADD', KEYS[1], string.format('%d.5', now + tonumber(ARGV[5])), v)
    end
    if #head > 0 then
      redis.call('ZREM', KEYS[3], unpack(head))
      redis.call('ZREM', KEYS[4], unpack(head))
    end
  end
end
return 1
