-- An order's state for the shopper (result, events), answered only from a
-- server the sale was verified on: a shopper's status never moves back.
--
-- A Redis that went back in time (a replica promoted while it lagged, a
-- restart from an old snapshot) holds an older copy of an order: "pending"
-- for an order another server had marked success, "success" for one it had
-- marked paid. Only those two can be older than what a shopper was shown; a
-- paid, expired, released or failed order is final (each excludes the
-- others), so it is answered as read.
--
-- For a pending or success order the script answers it unverified when the
-- sale is fenced (being rebuilt: its order states are not yet the
-- ledger's), or when this server is not the one the sale's meta was
-- verified on (its run id, as deduct.lua compares it) — and then fences the
-- sale itself, as the deduction and the deadline sweep do, so that a sale
-- nobody buys any more (sold out) is rebuilt too.
--
-- Every poll of an undecided order runs this, so it is lean: no
-- order_fn.lua (its tables cost more than the reads), the state is the
-- value's first byte. The run id costs an INFO, more than the rest of the
-- call (~10 µs against ~6 µs, redis-benchmark on the shared test VM):
-- a verification is stamped in the meta ('verified', this server's TIME)
-- and trusted for ARGV[4] ms. A server that went back in time holds a stamp
-- at least as old as the last write it received from the server it
-- replaces, and a failover waits out a node timeout (a restart its
-- downtime) before anyone reads from it, far longer than that. A stamp from
-- the future (another host's clock) is not trusted.
--
-- KEYS[1] sk:{p}:o:<id>  KEYS[2] sk:{p}:ob:<bucket>  KEYS[3] sk:{p}:meta
-- ARGV[1] the order id, ARGV[2] "1": check the run id (real Redis; "0" for
-- the embedded server, which has none), ARGV[3] the fence to set
-- ("<ms>:<node>:runid"), ARGV[4] the trust of a verification, ms.
-- Returns nil (no such order) or {verified (1/0), the order's value in the
-- string layout, or "" for an older edge's hash (the caller reads it)}.
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v then
  v = redis.pcall('GET', KEYS[1])
  if not v then return false end
  if type(v) == 'table' then
    if not string.find(v.err or '', 'WRONGTYPE', 1, true) then return redis.error_reply(v.err) end
    local st = redis.call('HGET', KEYS[1], 'state')
    if not st then return false end
    v = ''
    if st ~= 'pending' and st ~= 'success' then return {1, v} end
  end
end
local c = string.sub(v, 1, 1)
if v ~= '' and c ~= 'p' and c ~= 's' then return {1, v} end
local meta = redis.call('HMGET', KEYS[3], 'recovering', 'runid', 'verified')
if meta[1] then return {0, v} end
if ARGV[2] ~= '1' or not meta[2] then return {1, v} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stamp = tonumber(meta[3] or '0') or 0
if now >= stamp and now - stamp < tonumber(ARGV[4]) then return {1, v} end
if string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') ~= meta[2] then
  redis.call('HSETNX', KEYS[3], 'recovering', ARGV[3])
  return {0, v}
end
redis.call('HSET', KEYS[3], 'verified', now)
return {1, v}
