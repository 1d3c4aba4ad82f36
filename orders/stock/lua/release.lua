-- Returns an order's units to stock, at most once. The order's state is the
-- guard: a redelivered failure event finds "released" and does nothing, so
-- stock can never be returned twice (the classic rollback oversell).
--
-- KEYS[1] sk:{p}:stock   KEYS[2] sk:{p}:meta   KEYS[3] sk:{p}:o:<orderId>   KEYS[4] sk:{p}:u:<user>
-- ARGV[1] user (as read from the order; the buyer key must be declared in KEYS)
-- Returns 1 released, 0 nothing to do (released, failed or missing order),
-- -1 sale not warmed or fenced, -2 the order's user is not ARGV[1].
local o = redis.call('HMGET', KEYS[3], 'state', 'user', 'qty')
if o[1] ~= 'pending' and o[1] ~= 'success' then return 0 end
if o[2] ~= ARGV[1] then return -2 end
-- INCRBY on a missing key would create a sale with only this order's units;
-- a fenced sale is being rebuilt from the ledger, which this would race.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[2], 'recovering') == 1 then return -1 end
local qty = tonumber(o[3])
redis.call('INCRBY', KEYS[1], qty)
local bought = tonumber(redis.call('GET', KEYS[4]) or '0')
if bought > qty then
  redis.call('DECRBY', KEYS[4], qty) -- keeps the key's TTL
elseif bought > 0 then
  redis.call('DEL', KEYS[4]) -- never below 0
end
redis.call('HSET', KEYS[3], 'state', 'released')
redis.call('HINCRBY', KEYS[2], 'released', qty)
return 1
