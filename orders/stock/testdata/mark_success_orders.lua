-- Marks orders stored by the consumer as success, only from pending: a late
-- or redelivered store event must not resurrect a released order. An order
-- with a pay deadline (payby > 0) enters the due set as it becomes success:
-- from then on the deadline sweep (settle.go, lua/release.lua) may expire it.
-- KEYS[1] sk:{p}:due   KEYS[2..n] sk:{p}:o:<orderId> (one product)
-- ARGV[i] the order id of KEYS[i + 1]. Returns how many changed.
-- (order_fn.lua is prepended: both layouts of an order are read.)
local n = 0
local due = {}
for i = 2, #KEYS do
  local k = KEYS[i]
  -- The string layout, the common case: one GET, and the mark is its first
  -- byte (SETRANGE keeps the TTL and rewrites nothing else).
  local v = redis.pcall('GET', k)
  local user, payby
  if type(v) == 'string' then
    if string.byte(v, 1) == 112 then -- 'p'
      redis.call('SETRANGE', k, 0, 's')
      n = n + 1
      user, payby = string.match(v, '^p:([^:]+):[^:]*:[^:]*:[^:]*:[^:]*:(%d+)')
    end
  elseif v then
    -- WRONGTYPE (anything else is raised): an older edge's hash.
    local o = order_read(k)
    if o and o[1] == 'pending' then
      redis.call('HSET', k, 'state', 'success')
      n = n + 1
      user, payby = o[2], o[7]
    end
  end
  payby = tonumber(payby or '0') or 0
  if payby > 0 then
    due[#due + 1] = payby
    due[#due + 1] = ARGV[i - 1] .. ':' .. user
  end
end
-- One ZADD for the whole batch (unpack is bounded by Lua's stack: the
-- consumer's batches of one product stay far below it).
if #due > 0 then redis.call('ZADD', KEYS[1], unpack(due)) end
return n
