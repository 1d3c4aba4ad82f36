-- Explicit restock of a live sale. Refuses a missing stock key: creating it
-- here would open a sale that warm-up has not rebuilt.
--
-- KEYS[1] sk:{p}:stock   KEYS[2] sk:{p}:meta   ARGV[1] amount (> 0)
-- Returns the new stock, or nil when the sale is not warmed.
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
-- Reconciliation: sold = initial + restocked + released - remaining.
redis.call('HINCRBY', KEYS[2], 'restocked', ARGV[1])
return n
