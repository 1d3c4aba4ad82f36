-- The freed seats of a route room, shared by route_room_visit.lua and
-- route_room_end.lua (routeroom.go puts this before each).
--
-- seatsFreed adds n seats freed at now to the room's decayed count (state
-- hash st: fr at frms, time constant 20 s; fr0: when the first freed) and
-- answers the count at now and fr0 (now if none has freed yet).
local function seatsFreed(st, now, n)
  local f = redis.call('HMGET', st, 'fr', 'frms', 'fr0')
  local fr = tonumber(f[1] or '0') * math.exp(-math.max(now - tonumber(f[2] or now), 0) / 20000) + n
  if n > 0 then
    redis.call('HSET', st, 'fr', tostring(fr), 'frms', now)
    if not f[3] then
      redis.call('HSET', st, 'fr0', now)
      f[3] = now
    end
  end
  return fr, tonumber(f[3] or now)
end

-- reserveSeats gives the free seats under the cap to the head of the line
-- at once: each a reservation in act (its score, now + life, ends in .5)
-- that the visitor's next visit claims, and that frees the seat again
-- unclaimed. Only under a cap without a rate (a rate's bucket admits by
-- the line) and for fifo and random (not while held, not passthrough).
-- Answers the visitors a seat was reserved for (the edges wake them).
local function reserveSeats(act, q, seen, method, rate, cap, now, life)
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
  end
  if #head > 0 then
    redis.call('ZREM', q, unpack(head))
    redis.call('ZREM', seen, unpack(head))
  end
  return head
end
