-- A shopper's place in a sale's waiting room, admitting them if the line
-- has reached it. The status poll and the purchase-token call both run it.
-- KEYS: 1 sk:{p}:wr, 2 sk:{p}:wr:u:<user>, 3 sk:{p}:wr:rank, 4 sk:{p}:wr:active
-- ARGV: 1 now ms, 2 the ticket id the shopper holds ("" for the admin's
-- look-up), 3 max active (0: no cap), 4 session ms, 5 expire-at ms, 6 the
-- sale's start ms, 7 the configured rate per minute
-- Returns {result, seq, place, admitted until ms, frozen, members, ranked,
-- base, base ms, rate, paused, closed, admitted count, joined count}:
-- result 1, or -1 not joined, -2 the ticket is not this shopper's (nothing
-- changed). place 0: not known yet (before the lottery).
local u = redis.call('HMGET', KEYS[2], 'id', 'seq', 'until')
if not u[1] then
  return {-1}
end
if ARGV[2] ~= '' and u[1] ~= ARGV[2] then
  return {-2}
end
local now = tonumber(ARGV[1])
local st = redis.call('HMGET', KEYS[1], 'frozen', 'members', 'ranked', 'base', 'basems', 'rate', 'paused', 'closed', 'admitted', 'joined')
local frozen = st[1] == '1'
local members = tonumber(st[2] or '0')
local ranked = st[3] == '1'
local base = tonumber(st[4] or '0')
local basems = tonumber(st[5] or ARGV[6])
local rate = tonumber(st[6] or ARGV[7])
local paused = st[7] == '1'
local closed = st[8] == '1'
local count = tonumber(st[9] or '0')
local seq = tonumber(u[2])
local place = 0
if seq == 0 then
  if ranked then
    place = tonumber(redis.call('ZSCORE', KEYS[3], u[1]) or '0')
  end
elseif frozen then
  place = members + seq
end
local untilMs = tonumber(u[3] or '0')
if untilMs == 0 and place > 0 and not closed then
  local n = base
  if not paused and now > basems and rate > 0 then
    n = base + math.floor(rate * (now - basems) / 60000)
  end
  if place <= n then
    local room = true
    local cap = tonumber(ARGV[3])
    if cap > 0 then
      redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
      room = redis.call('ZCARD', KEYS[4]) < cap
    end
    if room then
      untilMs = now + tonumber(ARGV[4])
      redis.call('HSET', KEYS[2], 'until', untilMs)
      redis.call('ZADD', KEYS[4], untilMs, u[1])
      redis.call('PEXPIREAT', KEYS[4], tonumber(ARGV[5]))
      count = redis.call('HINCRBY', KEYS[1], 'admitted', 1)
    end
  end
end
return {1, seq, place, untilMs, frozen and 1 or 0, members, ranked and 1 or 0, base, basems, rate,
  paused and 1 or 0, closed and 1 or 0, count, tonumber(st[10] or '0')}
