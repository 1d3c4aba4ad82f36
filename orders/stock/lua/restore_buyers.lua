-- Ledger rebuild, step 2: buyers' counts of a fenced sale (Redis lost its
-- memory or went back in time). Guarded by the fence: once the sale is open
-- again (this rebuild's last step, or another edge's), a count written here
-- could undo a purchase, so nothing is written.
-- A count is only ever raised: a key that holds more (written by a
-- concurrent rebuild, or surviving a partial loss) is kept.
--
-- KEYS[1] sk:{p}:meta   KEYS[2..n] sk:{p}:u:<user>
-- ARGV[1] the fence   ARGV[2] expiry, unix ms (PXAT; the sale's end + buyer grace)
-- ARGV[3..n+1] the units each buyer holds (for KEYS[i], ARGV[i+1])
-- Returns -1 when the fence is not ARGV[1] (nothing written), else the keys raised.
if redis.call('HGET', KEYS[1], 'recovering') ~= ARGV[1] then return -1 end
local n = 0
for i = 2, #KEYS do
  local cur = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  if tonumber(ARGV[i + 1]) > cur then
    redis.call('SET', KEYS[i], ARGV[i + 1], 'PXAT', ARGV[2])
    n = n + 1
  end
end
return n
