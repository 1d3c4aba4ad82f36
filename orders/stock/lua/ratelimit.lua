-- nginx limit_req kept in Redis, for every edge at once (ratelimit.go).
-- KEYS[i]   sk:rl:{<client>}:<zone>: "<excess>:<last ms>" of limit i
--           (excess in milli-requests, as nginx keeps it)
-- ARGV[1]   now in unix ms, or "" for this server's clock (TIME)
-- ARGV[2]   units wanted (>= 1): the request itself plus a lease
-- ARGV[3i], ARGV[3i+1], ARGV[3i+2]  limit i's rate (milli-requests/s),
--           burst and delay (both in milli-requests)
--
-- For each limit, nginx's arithmetic for one request:
--   excess = max(excess - rate*elapsed_ms/1000 + 1000, 0)
--   excess > burst -> refused, state unchanged
-- The request passes only if every limit passes, and only then is charged
-- to all of them (nginx with several limit_req in one location). Units
-- beyond the first are granted only while every limit stays within its
-- delay (they pass without waiting): k units store excess + (k-1)*1000, as
-- k requests at the same millisecond would. A delayed request gets one.
--
-- Returns {units granted (0: refused), delay ms of the first unit,
--          wait ms of the first refusing limit, wait ms until every limit
--          passes, index (0-based) of the first refusing limit or -1}.
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local want = tonumber(ARGV[2])
local n = #KEYS
local excess, last = {}, {}
local first, waitFirst, waitAll = -1, 0, 0
local units, delay = want, 0
for i = 1, n do
  local a = 3 * i
  local rate, burst, thr = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local e, l = 0, now
  local v = redis.call('GET', KEYS[i])
  if v then
    local se, sl = string.match(v, '^(%d+):(%d+)$')
    se, sl = tonumber(se), tonumber(sl)
    if se then
      local ms = now - sl
      -- nginx's guard against the clock going back: a small step counts
      -- as no time, a large one (a reset) as one millisecond.
      if ms < -60000 then ms = 1 elseif ms < 0 then ms = 0 end
      -- Past the idle time the excess is 0 whatever ms is; the cap keeps
      -- rate*ms exact in Lua's doubles.
      local idle = math.floor(((se + 1000) * 1000 + rate - 1) / rate)
      if ms > idle then ms = idle end
      e = se - math.floor(rate * ms / 1000) + 1000
      if e < 0 then e = 0 end
      if ms == 0 then l = sl end
      if e > burst then
        -- passes once rate*(ms+wait)/1000 >= stored + 1000 - burst
        local w = math.floor(((se + 1000 - burst) * 1000 + rate - 1) / rate) - ms
        if w < 1 then w = 1 end
        if first < 0 then first, waitFirst = i - 1, w end
        if w > waitAll then waitAll = w end
      end
    end
  end
  excess[i], last[i] = e, l
  if e > thr then
    units = 1
    local d = math.floor((e - thr) * 1000 / rate)
    if d > delay then delay = d end
  else
    local k = math.floor((thr - e) / 1000) + 1
    if k < units then units = k end
  end
end
if first >= 0 then
  return {0, 0, waitFirst, waitAll, first}
end
for i = 1, n do
  local rate = tonumber(ARGV[3 * i])
  local e = excess[i] + (units - 1) * 1000
  -- An idle key computes like an absent one, so it may go then; the
  -- second of slack changes no decision.
  local ttl = math.floor(((e + 1000) * 1000 + rate - 1) / rate) + 1000
  if last[i] > now then ttl = ttl + last[i] - now end
  redis.call('SET', KEYS[i], string.format('%d:%d', e, last[i]), 'PX', ttl)
end
return {units, delay, 0, 0, -1}
