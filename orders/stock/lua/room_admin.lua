-- The operator changes a sale's admission: the line is rebased at now, so
-- nobody already let in is taken back and the places keep their order.
-- KEYS: 1 sk:{p}:wr
-- ARGV: 1 action (pause, resume, close, open, rate), 2 now ms, 3 the new
-- rate per minute (rate), 4 the sale's start ms, 5 the configured rate,
-- 6 expire-at ms
-- Returns {base, base ms, rate, paused, closed}.
local st = redis.call('HMGET', KEYS[1], 'base', 'basems', 'rate', 'paused')
local now = tonumber(ARGV[2])
local base = tonumber(st[1] or '0')
local basems = tonumber(st[2] or ARGV[4])
local rate = tonumber(st[3] or ARGV[5])
local paused = st[4] == '1'
local n = base
if not paused and now > basems and rate > 0 then
  n = base + math.floor(rate * (now - basems) / 60000)
end
-- A line that has not started yet keeps its start.
local at = math.max(now, basems)
if now < basems then n = base end
local a = ARGV[1]
if a == 'pause' then
  redis.call('HSET', KEYS[1], 'base', n, 'basems', at, 'paused', '1')
elseif a == 'resume' then
  redis.call('HSET', KEYS[1], 'base', n, 'basems', at, 'paused', '0')
elseif a == 'rate' then
  redis.call('HSET', KEYS[1], 'base', n, 'basems', at, 'rate', ARGV[3])
elseif a == 'close' then
  redis.call('HSET', KEYS[1], 'closed', '1')
elseif a == 'open' then
  redis.call('HSET', KEYS[1], 'closed', '0')
end
redis.call('PEXPIREAT', KEYS[1], tonumber(ARGV[6]))
local r = redis.call('HMGET', KEYS[1], 'base', 'basems', 'rate', 'paused', 'closed')
return {tonumber(r[1] or '0'), tonumber(r[2] or ARGV[4]), tonumber(r[3] or ARGV[5]), r[4] == '1' and 1 or 0, r[5] == '1' and 1 or 0}
