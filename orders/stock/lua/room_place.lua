-- A shopper's place in a sale's waiting room, admitting them if the line
-- has reached it (place() in room_place_fn.lua, which Go prepends).
-- KEYS: 1 sk:{p}:wr, 2 sk:{p}:wr:u:<user>, 3 sk:{p}:wr:rank, 4 sk:{p}:wr:active,
-- 5 sk:{p}:wr:pre
-- ARGV: 1 now ms, 2 the ticket id the shopper holds, 3 max active (0: no
-- cap), 4 session ms, 5 expire-at ms, 6 the sale's start ms, 7 the
-- configured rate per minute, 8 the place the shopper's signed ticket
-- carries (0: none), 9 the most tickets the edge has seen the room give
-- (its joined count)
--
-- A shopper the room does not know who holds a ticket with a place (the
-- edge signed both: it gave her that place) was forgotten by Redis — a
-- restart empty or from an old snapshot, a replica promoted behind — and
-- is put back at her place, so that nobody waiting loses it (nemesis
-- finding 5: every shopper of the line answered NOT_JOINED for good). The
-- room's numbering of new joins is raised past every place the edge has
-- seen given, so that a newcomer does not join ahead of those put back.
-- (Before the first poll of an edge that saw the room, a newcomer may still
-- get a forgotten number; the line admits by place either way.)
if ARGV[2] ~= '' and tonumber(ARGV[8] or '0') > 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  local st = redis.call('HMGET', KEYS[1], 'frozen', 'members', 'fifo', 'joined')
  local off = redis.call('SCARD', KEYS[5])
  if st[1] == '1' then off = tonumber(st[2] or '0') end
  local seq = math.max(tonumber(ARGV[8]) - off, 1)
  local seen = tonumber(ARGV[9] or '0')
  if tonumber(st[3] or '0') < math.max(seen - off, seq) then
    redis.call('HSET', KEYS[1], 'fifo', math.max(seen - off, seq))
  end
  if tonumber(st[4] or '0') < math.max(seen, off + seq) then
    redis.call('HSET', KEYS[1], 'joined', math.max(seen, off + seq))
  end
  redis.call('PEXPIREAT', KEYS[1], ARGV[5])
  redis.call('HSET', KEYS[2], 'id', ARGV[2], 'seq', seq)
  redis.call('PEXPIREAT', KEYS[2], ARGV[5])
end
return place(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV)
