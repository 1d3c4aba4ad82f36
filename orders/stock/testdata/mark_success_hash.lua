-- Marks orders stored by the consumer as success, only from pending: a late
-- or redelivered store event must not resurrect a released order. An order
-- with a pay deadline (payby > 0) enters the due set as it becomes success:
-- from then on the deadline sweep (settle.go, lua/release.lua) may expire it.
-- KEYS[1] sk:{p}:due   KEYS[2..n] sk:{p}:o:<orderId> (one product)
-- ARGV[i] the order id of KEYS[i + 1]. Returns how many changed.
local n = 0
local due = {}
for i = 2, #KEYS do
  local o = redis.call('HMGET', KEYS[i], 'state', 'user', 'payby')
  if o[1] == 'pending' then
    redis.call('HSET', KEYS[i], 'state', 'success')
    n = n + 1
    local payby = tonumber(o[3] or '0') or 0
    if payby > 0 then
      due[#due + 1] = payby
      due[#due + 1] = ARGV[i - 1] .. ':' .. o[2]
    end
  end
end
-- One ZADD for the whole batch (unpack is bounded by Lua's stack: the
-- consumer's batches of one product stay far below it).
if #due > 0 then redis.call('ZADD', KEYS[1], unpack(due)) end
return n
