-- The origin ended a visitor's session (its end header): the seat frees at
-- once, and goes in the same call to the next in line as a reservation
-- (route_room_seats.lua), which they claim with their next request (a held
-- one at once: routeroom.go publishes who to wake, and that the session
-- ended, to every edge).
-- KEYS: 1 sk:room:{r}:act, 2 sk:room:{r}:st, 3 sk:room:{r}:q, 4 sk:room:{r}:seen,
-- 5 sk:room:{r}:since
-- ARGV: 1 visitor id, 2 now ms, 3 the configured admissions per minute,
-- 4 the configured max active, 5 abandon ms (a reservation's life),
-- 6 the method in force
-- Returns {1, the visitors a seat was reserved for...} if the session was
-- running, {0} otherwise.
local now = tonumber(ARGV[2])
local n = redis.call('ZREM', KEYS[1], ARGV[1])
if n == 0 then
  return {0}
end
redis.call('HINCRBY', KEYS[2], 'ended', 1)
seatFreed(KEYS[2], KEYS[5], ARGV[1], now)
lapse(KEYS[1], KEYS[2], KEYS[5], now)
local st = redis.call('HMGET', KEYS[2], 'method', 'rate', 'cap')
local reserved = reserveSeats(KEYS[1], KEYS[3], KEYS[4], KEYS[5], st[1] or ARGV[6], tonumber(st[2] or ARGV[3]), tonumber(st[3] or ARGV[4]),
  now, tonumber(ARGV[5]))
table.insert(reserved, 1, 1)
return reserved
