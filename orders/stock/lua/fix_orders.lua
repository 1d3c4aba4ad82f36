-- Ledger rebuild, step 1: order hashes that outlived the loss (the embedded
-- Redis restores them from a snapshot older than the crash) take the state
-- the ledger knows. A hash left "pending" although its order was released
-- after the snapshot would let a cancel release it twice. Guarded like
-- restore_buyers.lua: the release script refuses while the sale is fenced,
-- so no release can race this.
--
-- KEYS[1] sk:{p}:meta   KEYS[2..n] sk:{p}:o:<orderId>
-- ARGV[1] the fence   ARGV[2..n] the state for KEYS[i]
-- Returns -1 when the fence is not ARGV[1] (nothing written), else the hashes set.
if redis.call('HGET', KEYS[1], 'recovering') ~= ARGV[1] then return -1 end
local n = 0
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('HSET', KEYS[i], 'state', ARGV[i]) -- keeps the hash's TTL
    n = n + 1
  end
end
return n
