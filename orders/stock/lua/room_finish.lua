-- An admitted shopper bought: they no longer count against max_active.
-- KEYS: 1 sk:{p}:wr:u:<user>, 2 sk:{p}:wr:active
local id = redis.call('HGET', KEYS[1], 'id')
if id then
  redis.call('ZREM', KEYS[2], id)
end
return 0
