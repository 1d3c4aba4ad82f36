-- A visitor at a route's waiting room (routeroom.go): joins the queue if
-- new, is let in if their place is within what the room may admit now, and
-- hears their place otherwise. One call per waiting visitor's request.
-- KEYS: 1 sk:room:{r}:st, 2 sk:room:{r}:q, 3 sk:room:{r}:seen, 4 sk:room:{r}:act,
-- 5 sk:room:{r}:since, 6 (a new visitor's proof of work, optional)
-- sk:room:{r}:c:<challenge id>
-- ARGV: 1 now ms, 2 visitor id, 3 the id's lottery score (method random),
-- 4 the configured admissions per minute (0: no bound), 5 the configured
-- max active (0: no cap), 6 session ms, 7 abandon ms, 8 the configured
-- method, 9 the keys' lifetime ms after this call, 10 how long the
-- challenge lives on, ms (with KEYS[6]; its key lives as long)
-- Returns {status, until ms, place, credit, rate, active, cap, seat ms,
-- waiting, method, reserved}: status 1 admitted (until: the session's end), 0 waiting
-- at place (1: the next), 2 let in by passthrough, 3 the challenge was
-- spent already (nothing written). credit: admissions the
-- rate allows now (-1: no bound); seat ms: when the cap is what holds the
-- place, how long until the seat it waits for frees (0: not the cap);
-- reserved: the visitors a seat was reserved for in this call (routeroom.go
-- wakes them on every edge).
local now, id = tonumber(ARGV[1]), ARGV[2]
local st = redis.call('HMGET', KEYS[1], 'method', 'rate', 'cap', 'credit', 'creditms')
local method = st[1] or ARGV[8]
local rate = tonumber(st[2] or ARGV[4])
local cap = tonumber(st[3] or ARGV[5])
local ttl = tonumber(ARGV[9])
local reserved = {}
-- A proof of work is good for one visitor: spent here, with the visit.
if KEYS[6] and not redis.call('SET', KEYS[6], '1', 'NX', 'PX', ARGV[10]) then
  return {3, 0, 0, -1, rate, 0, cap, 0, 0, method, reserved}
end
-- queue_all and an event's pre-queue (method prequeue, which the edge
-- sends, never the operator) let nobody in, the admitted neither.
local hold = method == 'queue_all' or method == 'prequeue'
-- Who stopped polling loses the place, so nobody waits behind them.
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[7]), 'LIMIT', 0, 256)
if #gone > 0 then
  redis.call('ZREM', KEYS[2], unpack(gone))
  redis.call('ZREM', KEYS[3], unpack(gone))
  redis.call('HINCRBY', KEYS[1], 'abandoned', #gone)
end
-- Lapsed sessions free their seats (counted for the estimate of a capped
-- place below), and free seats go to the head of the line at once
-- (route_room_seats.lua).
lapse(KEYS[4], KEYS[1], KEYS[5], now)
reserved = reserveSeats(KEYS[4], KEYS[2], KEYS[3], KEYS[5], method, rate, cap, now, tonumber(ARGV[7]))
local function keep()
  for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], ttl) end
end
local untilMs = tonumber(redis.call('ZSCORE', KEYS[4], id) or '0')
if untilMs > now then
  keep()
  if untilMs % 1 ~= 0 and not hold then
    -- A reservation, claimed: the session starts now.
    local u = now + tonumber(ARGV[6])
    redis.call('ZADD', KEYS[4], u, id)
    redis.call('HINCRBY', KEYS[1], 'admitted', 1)
    return {1, u, 0, 0, rate, 0, cap, 0, 0, method, reserved}
  end
  if hold then
    -- Held with a running session: waits without a place, and walks in
    -- on the pass they hold once the hold ends.
    return {0, 0, 0, -1, rate, 0, cap, 0, redis.call('ZCARD', KEYS[2]), method, reserved}
  end
  return {1, untilMs, 0, 0, rate, 0, cap, 0, 0, method, reserved}
end
local active = redis.call('ZCARD', KEYS[4])
-- The rate's bucket: a minute's rate, at most a second's worth banked (one
-- at least), so no 60 s window lets in more than rate + rate/60.
local credit = -1
if rate > 0 then
  local burst = math.max(1, rate / 60)
  local c = tonumber(st[4] or burst)
  local cms = tonumber(st[5] or now)
  credit = math.min(burst, c + rate * math.max(now - cms, 0) / 60000)
end
local function admit(status)
  local u = now + tonumber(ARGV[6])
  redis.call('ZADD', KEYS[4], u, id)
  redis.call('HSET', KEYS[5], id, now)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('HINCRBY', KEYS[1], 'admitted', 1)
  if credit >= 0 then credit = math.max(credit - 1, 0) end
  return u
end
local function save()
  if credit >= 0 then
    redis.call('HSET', KEYS[1], 'credit', tostring(credit), 'creditms', now)
  end
  keep()
end
local free = -1
if cap > 0 then free = math.max(cap - active, 0) end
if method == 'passthrough' then
  -- Everyone in, and counted: the dry run says who the rules would queue.
  if (credit >= 0 and credit < 1) or free == 0 or redis.call('ZCARD', KEYS[2]) > 0 then
    redis.call('HINCRBY', KEYS[1], 'over', 1)
  end
  local u = admit(2)
  save()
  return {2, u, 0, math.floor(credit), rate, active + 1, cap, 0, 0, method, reserved}
end
local score = redis.call('ZSCORE', KEYS[2], id)
if not score then
  if method == 'random' or method == 'prequeue' then
    -- The lottery's score is in [0, 1), before every fifo number: a
    -- pre-queue drawn this way is shuffled at the start, ahead of later
    -- arrivals.
    score = ARGV[3]
  else
    score = redis.call('HINCRBY', KEYS[1], 'seq', 1)
  end
  redis.call('ZADD', KEYS[2], score, id)
  redis.call('HINCRBY', KEYS[1], 'joined', 1)
end
redis.call('ZADD', KEYS[3], now, id)
local pos = redis.call('ZRANK', KEYS[2], id) + 1
if not hold then
  local avail = pos
  if credit >= 0 then avail = math.min(avail, math.floor(credit)) end
  if free >= 0 then avail = math.min(avail, free) end
  if pos <= avail then
    local u = admit(1)
    save()
    return {1, u, 0, math.floor(credit), rate, active + 1, cap, 0, 0, method, reserved}
  end
end
local seat = 0
if free >= 0 and pos > free then
  local k = pos - free
  local occ = meanOccupancy(KEYS[1])
  if occ then
    -- The room is full while anyone waits: its seats free at cap / the
    -- mean occupancy of the seats freed so far (by the origin's end, a
    -- time-out, a reservation unclaimed), whatever the sessions' limit.
    seat = math.ceil(k * occ / cap)
  elseif k <= active then
    -- None freed yet: at the latest when the sessions run out.
    local e = redis.call('ZRANGE', KEYS[4], k - 1, k - 1, 'WITHSCORES')
    if e[2] then seat = tonumber(e[2]) - now end
  else
    -- Beyond the seats taken now: whole sessions more.
    local e = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
    local last = 0
    if e[2] then last = tonumber(e[2]) - now end
    seat = last + math.floor((k - active - 1) / cap + 1) * tonumber(ARGV[6])
  end
end
save()
local cr = -1
if credit >= 0 then cr = math.floor(credit) end
return {0, 0, pos, cr, rate, active, cap, seat, redis.call('ZCARD', KEYS[2]), method, reserved}
