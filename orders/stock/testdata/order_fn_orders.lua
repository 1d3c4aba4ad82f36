-- An order's two layouts (keys.go has them in full), prepended to every
-- script that reads an order: the string a new edge writes once,
--   <c>:<user>:<qty>:<price>:<created>:<node>:<payby>[:<paid>:<closed>]
-- with the state as its first byte (p pending, s success, P paid, E expired,
-- R released, F failed), and the hash an older edge wrote (fields state user
-- qty price created node payby paid closed). Both are read, during a rolling
-- upgrade one product can hold both, and an order keeps its layout for life:
-- a hash is changed with HSET, a string with SETRANGE or SET KEEPTTL.
local order_state = {p = 'pending', s = 'success', P = 'paid', E = 'expired', R = 'released', F = 'failed'}
local order_code = {pending = 'p', success = 's', paid = 'P', expired = 'E', released = 'R', failed = 'F'}

-- order_read(k) returns the order as {state, user, qty, price, created,
-- node, payby, paid, closed} (absent hash fields false) and true for the
-- string layout, false for a hash; nil when there is no such order.
local function order_read(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'string' then
    local o = {order_state[string.sub(v, 1, 1)]}
    for f in string.gmatch(string.sub(v, 3), '[^:]+') do o[#o + 1] = f end
    return o, true
  end
  if not v then return nil end
  if not string.find(v.err or '', 'WRONGTYPE', 1, true) then error(v.err) end
  local o = redis.call('HMGET', k, 'state', 'user', 'qty', 'price', 'created', 'node', 'payby', 'paid', 'closed')
  if not o[1] then return nil end
  return o, false
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

-- order_make(k, o, ttl, hashes) makes order k (absent) with TTL ttl ms, as a
-- hash when hashes (Options.OrderHashes), else as a string.
local function order_make(k, o, ttl, hashes)
  if not hashes then return redis.call('SET', k, order_value(o), 'PX', ttl) end
  redis.call('HSET', k, 'state', o[1], 'user', o[2], 'qty', o[3], 'price', o[4], 'created', o[5],
    'node', o[6], 'payby', o[7] or '0', 'paid', o[8] or '0', 'closed', o[9] or '0')
  redis.call('PEXPIRE', k, ttl)
end
