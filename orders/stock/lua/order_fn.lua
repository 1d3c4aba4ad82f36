-- An order's three layouts (keys.go has them in full), prepended to every
-- script that reads an order (but order_result.lua, the poll's, which reads
-- the state byte alone): in a sale of ledger "b" a field of its order
-- bucket hash (sk:{p}:ob:<bucket>, field the order id) whose value is the
-- string layout's; else the string a new edge writes once,
--   <c>:<user>:<qty>:<price>:<created>:<node>:<payby>[:<paid>:<closed>]
-- with the state as its first byte (p pending, s success, P paid, E expired,
-- R released, F failed), and the hash an older edge wrote (fields state user
-- qty price created node payby paid closed). Both are read, during a rolling
-- upgrade one product can hold both, and an order keeps its layout for life:
-- a hash is changed with HSET, a string with SETRANGE or SET KEEPTTL.
local order_state = {p = 'pending', s = 'success', P = 'paid', E = 'expired', R = 'released', F = 'failed'}
local order_code = {pending = 'p', success = 's', paid = 'P', expired = 'E', released = 'R', failed = 'F'}

local function order_parse(v)
  local o = {order_state[string.sub(v, 1, 1)]}
  for f in string.gmatch(string.sub(v, 3), '[^:]+') do o[#o + 1] = f end
  return o
end

-- order_read(k, bk, id) returns the order as {state, user, qty, price,
-- created, node, payby, paid, closed} (absent hash fields false) and where
-- it is: 'b' field id of the order bucket hash bk (looked at first, when bk
-- is given), 's' the string at k, 'h' an older edge's hash at k; nil when
-- there is no such order.
local function order_read(k, bk, id)
  if bk then
    local v = redis.call('HGET', bk, id)
    if v then return order_parse(v), 'b' end
  end
  local v = redis.pcall('GET', k)
  if type(v) == 'string' then return order_parse(v), 's' end
  if not v then return nil end
  if not string.find(v.err or '', 'WRONGTYPE', 1, true) then error(v.err) end
  local o = redis.call('HMGET', k, 'state', 'user', 'qty', 'price', 'created', 'node', 'payby', 'paid', 'closed')
  if not o[1] then return nil end
  return o, 'h'
end

-- order_value(o) is o in the string layout; paid and closed are appended
-- once either is set.
local function order_value(o)
  local v = order_code[o[1]] .. ':' .. (o[2] or '') .. ':' .. (o[3] or '0') .. ':' .. (o[4] or '0') .. ':' ..
    (o[5] or '0') .. ':' .. (o[6] or '0') .. ':' .. (o[7] or '0')
  local paid, closed = o[8] or '0', o[9] or '0'
  if paid ~= '0' or closed ~= '0' then v = v .. ':' .. paid .. ':' .. closed end
  return v
end

-- order_put(k, bk, id, o, at) writes o again whole where order_read found
-- it ('b' or 's'), keeping the key's TTL.
local function order_put(k, bk, id, o, at)
  if at == 'b' then return redis.call('HSET', bk, id, order_value(o)) end
  redis.call('SET', k, order_value(o), 'KEEPTTL')
end

-- order_make(k, bk, id, o, ttl, hashes, batched) makes order id (absent)
-- living ttl ms at least: in its bucket hash bk when batched (ledger "b":
-- NX gives a new hash its expiry, GT lengthens an existing one's), else at
-- k as a hash when hashes (Options.OrderHashes), else as a string.
local function order_make(k, bk, id, o, ttl, hashes, batched)
  if batched then
    redis.call('HSET', bk, id, order_value(o))
    redis.call('PEXPIRE', bk, ttl, 'NX')
    redis.call('PEXPIRE', bk, ttl, 'GT')
    return
  end
  if not hashes then return redis.call('SET', k, order_value(o), 'PX', ttl) end
  redis.call('HSET', k, 'state', o[1], 'user', o[2], 'qty', o[3], 'price', o[4], 'created', o[5],
    'node', o[6], 'payby', o[7] or '0', 'paid', o[8] or '0', 'closed', o[9] or '0')
  redis.call('PEXPIRE', k, ttl)
end
