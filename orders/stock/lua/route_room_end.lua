-- The origin ended a visitor's session (its end header): the seat frees at
-- once for the next in line.
-- KEYS: 1 sk:room:{r}:act, 2 sk:room:{r}:st
-- ARGV: 1 visitor id
-- Returns 1 if the session was running, 0 otherwise.
local n = redis.call('ZREM', KEYS[1], ARGV[1])
if n == 1 then
  redis.call('HINCRBY', KEYS[2], 'ended', 1)
end
return n
