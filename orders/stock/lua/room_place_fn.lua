-- place(): a shopper's place in a sale's waiting room, admitting them if
-- the line has reached it; shared by room_place.lua (the status poll and the
-- purchase-token call) and room_join.lua (the join answers the place at once).
-- Go prepends this file to both scripts (waitroom.go).
-- kRoom sk:{p}:wr, kUser sk:{p}:wr:u:<user>, kRank sk:{p}:wr:rank,
-- kActive sk:{p}:wr:active, kPre sk:{p}:wr:pre; a: now ms, the ticket id the shopper holds ("":
-- not checked), max active (0: no cap), session ms, expire-at ms, the
-- sale's start ms, the configured rate per minute.
-- Returns {result, seq, place, admitted until ms, frozen, members, ranked,
-- base, base ms, rate, paused, closed, admitted count, joined count}:
-- result 1, or -1 not joined, -2 the ticket is not this shopper's (nothing
-- changed). place 0: not known yet (before the lottery).
local function place(kRoom, kUser, kRank, kActive, kPre, a)
  local u = redis.call('HMGET', kUser, 'id', 'seq', 'until')
  if not u[1] then
    return {-1}
  end
  if a[2] ~= '' and u[1] ~= a[2] then
    return {-2}
  end
  local now = tonumber(a[1])
  local st = redis.call('HMGET', kRoom, 'frozen', 'members', 'ranked', 'base', 'basems', 'rate', 'paused', 'closed', 'admitted', 'joined')
  local frozen = st[1] == '1'
  local members = tonumber(st[2] or '0')
  local ranked = st[3] == '1'
  local base = tonumber(st[4] or '0')
  local basems = tonumber(st[5] or a[6])
  local rate = tonumber(st[6] or a[7])
  local paused = st[7] == '1'
  local closed = st[8] == '1'
  local count = tonumber(st[9] or '0')
  local seq = tonumber(u[2])
  local pos = 0
  if seq == 0 then
    if ranked then
      pos = tonumber(redis.call('ZSCORE', kRank, u[1]) or '0')
    end
  elseif frozen then
    pos = members + seq
  else
    -- Before the opening is counted (a fifo room's pre-queue, or the first
    -- moments after the start): the pre-queue joins no more after the
    -- start, so its size now is what the opening will count.
    pos = redis.call('SCARD', kPre) + seq
  end
  local untilMs = tonumber(u[3] or '0')
  if untilMs == 0 and pos > 0 and not closed then
    local n = base
    if not paused and now > basems and rate > 0 then
      n = base + math.floor(rate * (now - basems) / 60000)
    end
    if pos <= n then
      local room = true
      local cap = tonumber(a[3])
      if cap > 0 then
        redis.call('ZREMRANGEBYSCORE', kActive, '-inf', now)
        room = redis.call('ZCARD', kActive) < cap
      end
      if room then
        untilMs = now + tonumber(a[4])
        redis.call('HSET', kUser, 'until', untilMs)
        redis.call('ZADD', kActive, untilMs, u[1])
        redis.call('PEXPIREAT', kActive, tonumber(a[5]))
        count = redis.call('HINCRBY', kRoom, 'admitted', 1)
      end
    end
  end
  return {1, seq, pos, untilMs, frozen and 1 or 0, members, ranked and 1 or 0, base, basems, rate,
    paused and 1 or 0, closed and 1 or 0, count, tonumber(st[10] or '0')}
end
