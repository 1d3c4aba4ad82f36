-- The seats of a capped route room, shared by route_room_visit.lua and
-- route_room_end.lua (routeroom.go puts this before each).
--
-- A seat is occupied from when it is taken (an admission, or a reservation
-- for the next in line: sk:room:{r}:since, visitor id -> unix ms) until it
-- frees (the origin's end, the session's time-out, a reservation nobody
-- claimed). The occupancies feed the room's mean (state hash: occ and occn,
-- sums decayed with a time constant of 60 s, at occms): while anyone waits
-- the room is full, and its seats free at cap / mean occupancy — what a
-- capped place's estimate comes from.

-- seatFreed ends visitor id's occupancy at endMs.
local function seatFreed(st, since, id, endMs)
  local s = redis.call('HGET', since, id)
  if not s then
    return
  end
  redis.call('HDEL', since, id)
  local f = redis.call('HMGET', st, 'occ', 'occn', 'occms')
  local at = tonumber(f[3] or endMs)
  local decay = math.exp(-math.max(endMs - at, 0) / 60000)
  redis.call('HSET', st, 'occ', tostring(tonumber(f[1] or '0') * decay + math.max(endMs - tonumber(s), 0)),
    'occn', tostring(tonumber(f[2] or '0') * decay + 1), 'occms', math.max(endMs, at))
end

-- meanOccupancy is the mean occupancy of a seat, ms (nil: none freed yet).
local function meanOccupancy(st)
  local f = redis.call('HMGET', st, 'occ', 'occn')
  local n = tonumber(f[2] or '0')
  if n <= 0 then
    return nil
  end
  return tonumber(f[1]) / n
end

-- lapse frees the seats whose session or reservation ran out by now, each
-- at its end, and answers how many.
local function lapse(act, st, since, now)
  local gone = redis.call('ZRANGEBYSCORE', act, '-inf', now, 'WITHSCORES')
  for i = 1, #gone, 2 do
    seatFreed(st, since, gone[i], math.floor(tonumber(gone[i + 1])))
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', act, '-inf', now)
  end
  return #gone / 2
end

-- reserveSeats gives the free seats under the cap to the head of the line
-- at once: each a reservation in act (its score, now + life, ends in .5)
-- that the visitor's next visit claims, and that frees the seat again
-- unclaimed. Only under a cap without a rate (a rate's bucket admits by
-- the line) and for fifo and random (not while held, not passthrough).
-- Answers the visitors a seat was reserved for (the edges wake them).
local function reserveSeats(act, q, seen, since, method, rate, cap, now, life)
  if cap <= 0 or rate ~= 0 or (method ~= 'fifo' and method ~= 'random') then
    return {}
  end
  local free = cap - redis.call('ZCARD', act)
  if free <= 0 then
    return {}
  end
  local head = redis.call('ZRANGE', q, 0, free - 1)
  for _, v in ipairs(head) do
    redis.call('ZADD', act, string.format('%d.5', now + life), v)
    redis.call('HSET', since, v, now)
  end
  if #head > 0 then
    redis.call('ZREM', q, unpack(head))
    redis.call('ZREM', seen, unpack(head))
  end
  return head
end
