-- Ledger rebuild, step 1: the orders and the pay deadlines take what the
-- ledger knows (either layout of an order: order_fn.lua is prepended). An
-- order that outlived the loss (a snapshot older than the crash, a replica
-- that lagged) takes the ledger's state, in the layout it has: left
-- "success" although it was paid, released or expired after the snapshot,
-- it would let a cancel or a sweep release it twice, or a payment pay an
-- expired order. An order that was lost is made again (a string, or a hash
-- with ARGV[4]), so that it can still be paid, cancelled or expired — unless
-- ARGV[3] is "1": the settled orders' pages (every paid, cancelled or
-- expired order of the ledger) only correct orders that exist; a settle
-- call on one that is gone finds no order and releases nothing. Every
-- unpaid order with a deadline enters the due set again (also an overdue
-- one: the first sweep after the reopening releases it); a settled one
-- leaves it. Guarded like set_buyers.lua: the settle script refuses while
-- the sale is fenced, so no settlement can race this.
--
-- An order made again goes where the sale's ledger (the meta's "ledger")
-- puts it: "b" its order bucket hash, else its own key. A sale whose meta
-- was lost with Redis' memory (only the fence is left: no "initial") takes
-- the ledger ARGV[5] here, as warm-up would have given it (no order of it
-- survived to be in the other one).
--
-- KEYS[1] sk:{p}:meta   KEYS[2] sk:{p}:due
-- then per order i: KEYS[3+2i] sk:{p}:o:<orderId>   KEYS[4+2i] sk:{p}:ob:<its bucket>
-- ARGV[1] the fence   ARGV[2] the TTL of an order made again, ms
-- ARGV[3] "1": existing orders only   ARGV[4] "h": an order made again in
-- the per-order ledger is a hash (Options.OrderHashes)
-- ARGV[5] the ledger for a lost meta ("b" or "")
-- then per order: ARGV[6+10i..15+10i] = orderId state user qty
-- price created node payby paid closed
-- Returns -1 when the fence is not ARGV[1] (nothing written), else the
-- orders made again.
local meta = redis.call('HMGET', KEYS[1], 'recovering', 'ledger', 'initial')
if meta[1] ~= ARGV[1] then return -1 end
local ledger = meta[2]
if not ledger and not meta[3] and ARGV[5] == 'b' then
  ledger = 'b'
  redis.call('HSET', KEYS[1], 'ledger', 'b')
end
local existing = ARGV[3] == '1'
local made = 0
for i = 0, (#KEYS - 2) / 2 - 1 do
  local k, bk, a = KEYS[3 + 2 * i], KEYS[4 + 2 * i], 6 + 10 * i
  local state, user, payby = ARGV[a + 1], ARGV[a + 2], ARGV[a + 7]
  local member = ARGV[a] .. ':' .. user
  local o, at = order_read(k, bk, ARGV[a])
  if o and at ~= 'h' then
    -- An order keeps its layout: a string or a bucket field is written
    -- again whole (its key keeps its TTL).
    o[1] = state
    if payby ~= '0' then o[7] = payby end
    if ARGV[a + 8] ~= '0' then o[8] = ARGV[a + 8] end
    if ARGV[a + 9] ~= '0' then o[9] = ARGV[a + 9] end
    order_put(k, bk, ARGV[a], o, at)
  elseif o then
    redis.call('HSET', k, 'state', state) -- keeps the hash's TTL
    if payby ~= '0' then redis.call('HSET', k, 'payby', payby) end
    if ARGV[a + 8] ~= '0' then redis.call('HSET', k, 'paid', ARGV[a + 8]) end
    if ARGV[a + 9] ~= '0' then redis.call('HSET', k, 'closed', ARGV[a + 9]) end
  elseif not existing then
    o = {state, user, ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], payby, ARGV[a + 8], ARGV[a + 9]}
    order_make(k, bk, ARGV[a], o, ARGV[2], ARGV[4] == 'h', ledger == 'b')
    made = made + 1
  end
  if payby == '0' and o then payby = o[7] or '0' end
  if (state == 'success' or state == 'pending') and tonumber(payby) > 0 then
    redis.call('ZADD', KEYS[2], payby, member)
  else
    redis.call('ZREM', KEYS[2], member)
  end
end
return made
