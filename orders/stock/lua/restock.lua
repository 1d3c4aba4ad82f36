-- Explicit restock of a live sale. Refuses a missing stock key: creating it
-- here would open a sale that warm-up has not rebuilt; a fenced sale is being
-- rebuilt from the ledger, so it waits too.
--
-- KEYS[1] sk:{p}:stock   KEYS[2] sk:{p}:meta   ARGV[1] amount (> 0)
-- Returns the new stock, or nil when the sale is not warmed or fenced.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[2], 'recovering') == 1 then return false end
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
-- Reconciliation: sold = initial + restocked + released - remaining.
redis.call('HINCRBY', KEYS[2], 'restocked', ARGV[1])
return n
