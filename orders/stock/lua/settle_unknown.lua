-- Settles ONE purchase attempt whose deduction outcome is unknown (its script
-- call was sent and got no answer: a timeout, a connection reset). The
-- deduction may still run later (a paused Redis runs what it had received
-- when it resumes), so "not placed" is made true, not assumed: the attempt's
-- purchase token is marked used, and deduct.lua refuses a used token
-- (BAD_TOKEN) before it writes anything. Whichever of the two runs first
-- decides, atomically.
--
-- KEYS[1] sk:{p}:stock   KEYS[2] sk:{p}:meta   KEYS[3] sk:{p}:o:<orderId>   KEYS[4] sk:{p}:t:<nonce>
-- ARGV[1] user   ARGV[2] qty   ARGV[3] price   ARGV[4] created ms   ARGV[5] node
-- ARGV[6] order TTL ms   ARGV[7] "1" to fence, "0" to look only
--
-- Returns 1 placed (the order hash exists: the deduction ran and succeeded),
-- 2 not placed (fenced, now or by an earlier call), 3 absent (looked only:
-- nothing written), 0 not now: the sale is not open on a Redis the ledger
-- vouches for (stock key missing, closed for recovery, or a server other than
-- the one last verified), where an order's absence proves nothing.
if redis.call('EXISTS', KEYS[3]) == 1 then
  -- Only this script writes a "failed" order.
  if redis.call('HGET', KEYS[3], 'state') == 'failed' then return 2 end
  return 1
end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local meta = redis.call('HMGET', KEYS[2], 'recovering', 'runid')
if meta[1] then return 0 end
if meta[2] then
  local info = redis.pcall('INFO', 'server')
  if type(info) == 'string' and string.match(info, 'run_id:(%w+)') ~= meta[2] then return 0 end
end
if ARGV[7] ~= '1' then return 3 end
-- The token mark outlives any late deduction worth fearing: as long as the
-- order would have lived.
redis.call('SET', KEYS[4], '1', 'PX', ARGV[6])
-- A "failed" order, so that the shopper's result call has an answer.
redis.call('HSET', KEYS[3], 'state', 'failed', 'user', ARGV[1], 'qty', ARGV[2], 'price', ARGV[3],
  'created', ARGV[4], 'node', ARGV[5])
redis.call('PEXPIRE', KEYS[3], ARGV[6])
return 2
