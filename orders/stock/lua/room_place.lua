-- A shopper's place in a sale's waiting room, admitting them if the line
-- has reached it (place() in room_place_fn.lua, which Go prepends).
-- KEYS: 1 sk:{p}:wr, 2 sk:{p}:wr:u:<user>, 3 sk:{p}:wr:rank, 4 sk:{p}:wr:active,
-- 5 sk:{p}:wr:pre
-- ARGV: 1 now ms, 2 the ticket id the shopper holds, 3 max active (0: no
-- cap), 4 session ms, 5 expire-at ms, 6 the sale's start ms, 7 the
-- configured rate per minute
return place(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV)
