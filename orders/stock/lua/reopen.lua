-- Ledger rebuild, last step: reopens a fenced sale. The stock is lowered to
-- what the ledger says is left (or created, when Redis lost the key): a
-- Redis that went back in time holds more than is left, never less than the
-- ledger knows, except for deductions whose outcome nobody knows, which keep
-- the lower value — and the units released or restocked since its state was
-- taken, by which it may rise (see below). The reconciliation figures are only raised.
-- The ledger's stock may be below 0: unpaid orders whose deadline passed
-- while the sale was fenced are counted as held until the first sweep after
-- the reopening releases them (their deadlines are back in the due set,
-- fix_orders.lua); the deduction reads stock <= 0 as sold out meanwhile.
-- Guarded by the fence: another rebuild that already reopened (or a new
-- fence) makes this a no-op.
--
-- KEYS[1] sk:{p}:stock   KEYS[2] sk:{p}:meta
-- ARGV[1] fence   ARGV[2] stock per the ledger   ARGV[3] initial   ARGV[4] restocked
-- ARGV[5] released   ARGV[6] limit   ARGV[7] price   ARGV[8] startMs   ARGV[9] endMs
-- ARGV[10] tokens: purchase tokens expiring at or before this (unix ms) are refused
-- ARGV[11] "1": record the server's run id (see deduct.lua)
-- ARGV[12] paid   ARGV[13] expired (units, the ledger's)
-- Returns {stock before (-1: missing), stock after}, or {-2, 0} when the
-- fence is not ARGV[1] (nothing written).
if redis.call('HGET', KEYS[2], 'recovering') ~= ARGV[1] then return {-2, 0} end
local want = tonumber(ARGV[2])
local cur = redis.call('GET', KEYS[1])
local before = -1
if cur then before = tonumber(cur) end
-- Units released or restocked after the server's state was taken (a
-- snapshot, a lagging replica) are missing from its stock, and its meta's
-- figures show how many: the stock may rise by those, never by more. (The
-- pay deadline releases units all the time: without this, every expiry
-- between a snapshot and the restart would be a unit never sold again.)
local old = redis.call('HMGET', KEYS[2], 'released', 'restocked')
local since = math.max(0, tonumber(ARGV[5]) - (tonumber(old[1] or '0') or 0))
  + math.max(0, tonumber(ARGV[4]) - (tonumber(old[2] or '0') or 0))
local after = want
if cur then after = math.min(before + since, want) end
if not cur or after ~= before then redis.call('SET', KEYS[1], after) end
local function raise(field, v)
  local have = tonumber(redis.call('HGET', KEYS[2], field) or '0') or 0
  if tonumber(v) > have then redis.call('HSET', KEYS[2], field, v) end
end
raise('initial', ARGV[3])
raise('restocked', ARGV[4])
raise('released', ARGV[5])
raise('tokens', ARGV[10])
raise('paid', ARGV[12])
raise('expired', ARGV[13])
redis.call('HSET', KEYS[2], 'limit', ARGV[6], 'price', ARGV[7], 'start', ARGV[8], 'end', ARGV[9])
if ARGV[11] == '1' then
  redis.call('HSET', KEYS[2], 'runid', string.match(redis.call('INFO', 'server'), 'run_id:(%x+)'))
end
local fields = redis.call('HKEYS', KEYS[2])
for _, f in ipairs(fields) do
  if string.sub(f, 1, 6) == 'quiet:' then redis.call('HDEL', KEYS[2], f) end
end
redis.call('HDEL', KEYS[2], 'recovering')
return {before, after}
