-- Settles ONE purchase attempt whose deduction outcome is unknown (its script
-- call was sent and got no answer: a timeout, a connection reset). The
-- deduction may still run later (a paused Redis runs what it had received
-- when it resumes), so "not placed" is made true, not assumed: the attempt's
-- purchase token is marked used, and deduct.lua refuses a used token
-- (BAD_TOKEN) before it writes anything. Whichever of the two runs first
-- decides, atomically.
--
-- KEYS[1] sk:{p}:stock   KEYS[2] sk:{p}:meta   KEYS[3] sk:{p}:o:<orderId>   KEYS[4] sk:{p}:t:<nonce>
-- KEYS[5] sk:{p}:tk:<the token's expiry bucket> (both token layouts' keys:
-- the meta's layout says which one marks it, keys.go)
-- KEYS[6] sk:{p}:ob:<the order's bucket> (ledger "b": the order is there)
-- ARGV[1] user   ARGV[2] qty   ARGV[3] price   ARGV[4] created ms   ARGV[5] node
-- ARGV[6] order TTL ms   ARGV[7] "1" to fence, "0" to look only
-- ARGV[8] "h": a failed order is made as a hash (Options.OrderHashes)
-- ARGV[9] the token's nonce (its field in KEYS[5])   ARGV[10] the order id
-- With ARGV[7] "2" (an orphan: the attempt's edge died before it settled
-- it, and another edge settles it from the shopper's result call, knowing
-- neither its token nor its quantity, price or creation: ARGV[2..4] are 0
-- then): instead of the token's mark, every token expiring at or before
-- ARGV[12] is refused from now on (meta tokens raised to ARGV[11], as a
-- rebuild does), unless they are already (meta tokens >= ARGV[12], the
-- orphan's creation + the longest token life): its token was minted before
-- the attempt, so its late deduction, if any, is refused too. KEYS[4] and
-- KEYS[5] are then unused.
--
-- Returns 1 placed (the order exists: the deduction ran and succeeded),
-- 2 not placed (fenced, now or by an earlier call), 3 absent (looked only:
-- nothing written), 0 not now: the sale is not open on a Redis the ledger
-- vouches for (stock key missing, closed for recovery, or a server other than
-- the one last verified), where an order's absence proves nothing.
local o = order_read(KEYS[3], KEYS[6], ARGV[10]) -- any layout (order_fn.lua is prepended)
if o then
  -- Only this script writes a "failed" order.
  if o[1] == 'failed' then return 2 end
  return 1
end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local meta = redis.call('HMGET', KEYS[2], 'recovering', 'runid', 'layout', 'ledger')
if meta[1] then return 0 end
if meta[2] then
  local info = redis.pcall('INFO', 'server')
  if type(info) == 'string' and string.match(info, 'run_id:(%w+)') ~= meta[2] then return 0 end
end
if ARGV[7] == '0' then return 3 end
-- The token mark outlives any late deduction worth fearing: as long as the
-- order would have lived.
if ARGV[7] == '2' then
  local from = tonumber(redis.call('HGET', KEYS[2], 'tokens') or '0') or 0
  if from < tonumber(ARGV[12]) then redis.call('HSET', KEYS[2], 'tokens', math.max(from, tonumber(ARGV[11]))) end
elseif meta[3] == '2' then
  -- The token hash lives at least that long: NX gives a new hash its
  -- expiry, GT lengthens an existing one's (and never shortens it).
  redis.call('HSET', KEYS[5], ARGV[9], '1')
  redis.call('PEXPIRE', KEYS[5], ARGV[6], 'NX')
  redis.call('PEXPIRE', KEYS[5], ARGV[6], 'GT')
else
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[6])
end
-- A "failed" order, so that the shopper's result call has an answer.
order_make(KEYS[3], KEYS[6], ARGV[10], {'failed', ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], '0'}, ARGV[6],
  ARGV[8] == 'h', meta[4] == 'b')
return 2
