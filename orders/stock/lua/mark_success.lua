-- Marks orders stored by the consumer as success, only from pending: a late
-- or redelivered store event must not resurrect a released order.
-- KEYS = sk:{p}:o:<orderId>... (one product). Returns how many changed.
local n = 0
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'state') == 'pending' then
    redis.call('HSET', KEYS[i], 'state', 'success')
    n = n + 1
  end
end
return n
