-- Settles orders of one product: the one script that ends an order's hold
-- on its units, for a cancel, the pay deadline and a payment alike. The
-- order's state is the guard: only a pending or successful order changes,
-- so a redelivered cancel, a second edge's sweep of the same deadline or a
-- payment that arrives as the deadline fires finds the final state and
-- changes nothing. Stock is never returned twice (the classic rollback
-- oversell), and paid and expired never both happen to one order.
--
-- KEYS[1] sk:{p}:stock   KEYS[2] sk:{p}:meta   KEYS[3] sk:{p}:outbox   KEYS[4] sk:{p}:due
-- then per order i = 0..N-1: KEYS[5+4i] sk:{p}:o:<orderId>   KEYS[6+4i] sk:{p}:u:<user>
--   KEYS[7+4i] sk:{p}:b:<the user's shard> (both buyer layouts' keys: the
--   meta's layout says which holds the count, keys.go)
--   KEYS[8+4i] sk:{p}:ob:<the order's bucket> (ledger "b"; order_read
--   looks there first)
-- op pay only: KEYS[9] sk:{p}:wh:<replay id>, when the call carries one
-- ARGV[1] op: "cancel" (one order), "expire" (a batch), "pay" (one order)
-- ARGV[2] product   ARGV[3] "1": fence the sale when this server is not the
-- one its meta was verified on (see deduct.lua; "0" for the embedded server)
-- ARGV[4] the fence to set then   ARGV[5] the replay id's lifetime, ms (pay)
-- then per order: ARGV[6+2i] user (the buyer key's, checked against the
-- order's)   ARGV[7+2i] order id
--
-- Returns {status, now} then per order {code, outbox id or "", the order
-- after the call in the string layout ("" when there is none)} whichever
-- layout it is stored in (order_fn.lua is prepended). status: 0 done, -1 sale not warmed, -2 fenced
-- (nothing changed in either case, and no order entries follow), -4 the
-- replay id was seen before (nothing changed; the order entry follows).
-- now is Redis' clock (TIME), unix ms: the deadline is decided by it alone.
-- code: 1 the order changed (released, expired or paid: see its state), 0 it
-- did not (already final, or expire: not due yet), -3 no such order, -5 the
-- order's user is not the one given (nothing changed).
--
-- A release (cancel, or the deadline: expire, or a pay that came too late):
-- stock += qty, the buyer's count -= qty, meta released += qty (and expired
-- for the deadline), the order leaves the due set, state "released" or
-- "expired", closed = now, and an outbox entry of the release event. A
-- payment: state "paid", paid = closed = now, meta paid += qty, the order
-- leaves the due set, and an outbox entry of the paid event.
local op, product = ARGV[1], ARGV[2]
-- INCRBY on a missing key would create a sale with only this order's units;
-- a fenced sale is being rebuilt from the ledger, which this would race.
if redis.call('EXISTS', KEYS[1]) == 0 then
  if redis.call('HEXISTS', KEYS[2], 'recovering') == 1 then return {-2, 0} end
  return {-1, 0}
end
local meta = redis.call('HMGET', KEYS[2], 'recovering', 'runid', 'layout')
if meta[1] then return {-2, 0} end
local hashed = meta[3] == '2'
if ARGV[3] == '1' then
  -- Went back in time? The due set and the order states of an old snapshot
  -- would expire orders paid since; fence the sale as the deduction does.
  local id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  if id ~= meta[2] then
    redis.call('HSET', KEYS[2], 'recovering', ARGV[4])
    return {-2, 0}
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local res = {0, now}
local released, expired, paid = 0, 0, 0

local function entry(o, code, xid)
  res[#res + 1] = {code, xid, order_value(o)}
end

-- The settled state, one call either way: a string order or a bucket field
-- is written again whole, once (the key keeps its TTL), a hash gets the
-- changed fields.
local function settle(okey, obkey, id, o, at, state, paidAt)
  o[1], o[9] = state, tostring(now)
  if paidAt then o[8] = o[9] end
  if at ~= 'h' then
    order_put(okey, obkey, id, o, at)
  elseif paidAt then
    redis.call('HSET', okey, 'state', state, 'paid', now, 'closed', now)
  else
    redis.call('HSET', okey, 'state', state, 'closed', now) -- keeps the hash's TTL
  end
end

-- o = {state, user, qty, price, created, node, payby, paid, closed} (order_read)
local function release(okey, obkey, at, bkey, shard, id, o, reason)
  local qty = tonumber(o[3])
  redis.call('INCRBY', KEYS[1], qty)
  if hashed then
    -- Keeps the hash's TTL; a hash left empty is gone.
    if redis.call('HINCRBY', shard, o[2], -qty) <= 0 then
      redis.call('HDEL', shard, o[2]) -- never below 0
    end
  else
    local bought = tonumber(redis.call('GET', bkey) or '0')
    if bought > qty then
      redis.call('DECRBY', bkey, qty) -- keeps the key's TTL
    elseif bought > 0 then
      redis.call('DEL', bkey) -- never below 0
    end
  end
  local state = 'released'
  if reason == 'expired' then
    state = 'expired'
    expired = expired + qty
  end
  released = released + qty
  settle(okey, obkey, id, o, at, state, false)
  redis.call('ZREM', KEYS[4], id .. ':' .. o[2])
  return redis.call('XADD', KEYS[3], '*', 'type', 'release', 'reason', reason, 'released', now,
    'order', id, 'product', product, 'user', o[2], 'qty', o[3], 'price', o[4], 'created', o[5],
    'node', o[6], 'payby', o[7] or '0')
end

local function pay(okey, obkey, at, id, o)
  paid = paid + tonumber(o[3])
  settle(okey, obkey, id, o, at, 'paid', true)
  redis.call('ZREM', KEYS[4], id .. ':' .. o[2])
  return redis.call('XADD', KEYS[3], '*', 'type', 'paid', 'paid', now,
    'order', id, 'product', product, 'user', o[2], 'qty', o[3], 'price', o[4], 'created', o[5],
    'node', o[6], 'payby', o[7] or '0')
end

local n = (#KEYS - 4) / 4
if op == 'pay' then n = 1 end
for i = 0, n - 1 do
  local okey, bkey, shard, obkey = KEYS[5 + 4 * i], KEYS[6 + 4 * i], KEYS[7 + 4 * i], KEYS[8 + 4 * i]
  local user, id = ARGV[6 + 2 * i], ARGV[7 + 2 * i]
  local o, at = order_read(okey, obkey, id)
  local open = o and (o[1] == 'pending' or o[1] == 'success')
  local payby = o and tonumber(o[7] or '0') or 0
  if not o then
    -- Gone (its TTL, or never made): a deadline left behind is dropped.
    if op == 'expire' then redis.call('ZREM', KEYS[4], id .. ':' .. user) end
    res[#res + 1] = {-3, '', ''}
  elseif o[2] ~= user then
    if op == 'expire' then redis.call('ZREM', KEYS[4], id .. ':' .. user) end -- not this order's member
    entry(o, -5, '')
  elseif op == 'cancel' then
    if open then entry(o, 1, release(okey, obkey, at, bkey, shard, id, o, 'cancelled')) else entry(o, 0, '') end
  elseif op == 'expire' then
    if open and payby > 0 and payby <= now then
      entry(o, 1, release(okey, obkey, at, bkey, shard, id, o, 'expired'))
    elseif open and payby > now then
      entry(o, 0, '') -- not due on Redis' clock yet: left for a later sweep
    else
      redis.call('ZREM', KEYS[4], id .. ':' .. user) -- settled already, or no deadline
      entry(o, 0, '')
    end
  else -- pay
    if #KEYS == 9 and not redis.call('SET', KEYS[9], '1', 'NX', 'PX', ARGV[5]) then
      res[1] = -4
      entry(o, 0, '')
    elseif not open then
      entry(o, 0, '') -- paid already, or too late: the state says which
    elseif payby == 0 or now < payby then
      entry(o, 1, pay(okey, obkey, at, id, o))
    else
      -- The deadline passed and no sweep has run yet: the deadline wins,
      -- here, exactly as the sweep would have decided.
      entry(o, 1, release(okey, obkey, at, bkey, shard, id, o, 'expired'))
    end
  end
end
if released > 0 then redis.call('HINCRBY', KEYS[2], 'released', released) end
if expired > 0 then redis.call('HINCRBY', KEYS[2], 'expired', expired) end
if paid > 0 then redis.call('HINCRBY', KEYS[2], 'paid', paid) end
return res
