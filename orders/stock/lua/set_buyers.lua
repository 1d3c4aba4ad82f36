-- Ledger rebuild, step 2: every buyer's count of a fenced sale (Redis lost
-- its memory or went back in time) is set to exactly what the ledger and
-- the outbox say: raised where Redis lost purchases, lowered where it went
-- back to before a release (an order cancelled or expired after its
-- snapshot: left at the old count, its shopper would be refused at her
-- limit while she holds nothing). A count of 0 removes the key.
-- Lowering is safe here and nowhere else: the sale is fenced, so no
-- deduction and no release runs (deduct.lua and release.lua refuse), and
-- the rebuild began once every edge was quiet or past the in-flight bound
-- and the pipeline drained — every purchase that wrote a count is in the
-- ledger or in the outbox (deduct.lua writes both in one call), and the
-- counts given include both. Two rebuilds of one fence (a lock that
-- expired) read the same drained ledger and write the same counts.
-- Guarded by the fence: once the sale is open again (this rebuild's last
-- step, or another edge's), a count written here could undo a purchase, so
-- nothing is written.
--
-- KEYS[1] sk:{p}:meta   KEYS[2..n] sk:{p}:u:<user>
-- ARGV[1] the fence   ARGV[2] expiry, unix ms (PXAT; the sale's end + buyer grace)
-- ARGV[3..n+1] the units each buyer holds (for KEYS[i], ARGV[i+1]; 0: none)
-- Returns -1 when the fence is not ARGV[1] (nothing written), else the keys
-- changed (a key that already holds its count keeps it, and its TTL).
if redis.call('HGET', KEYS[1], 'recovering') ~= ARGV[1] then return -1 end
local n = 0
for i = 2, #KEYS do
  local want, cur = ARGV[i + 1], redis.call('GET', KEYS[i])
  if tonumber(want) > 0 then
    if cur ~= want then
      redis.call('SET', KEYS[i], want, 'PXAT', ARGV[2])
      n = n + 1
    end
  elseif cur then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
return n
