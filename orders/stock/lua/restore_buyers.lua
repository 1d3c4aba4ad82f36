-- Ledger rebuild, step 2: buyers' counts of a sale whose stock key is
-- missing (Redis lost its memory). Guarded by the missing stock key: once
-- the sale is open again (this rebuild's last step, or another edge's),
-- a count written here could undo a purchase, so nothing is written.
-- A count is only ever raised: a key that holds more (written by a
-- concurrent rebuild, or surviving a partial loss) is kept.
--
-- KEYS[1] sk:{p}:stock   KEYS[2..n] sk:{p}:u:<user>
-- ARGV[1] expiry, unix ms (PXAT; the sale's end + buyer grace)
-- ARGV[2..n] the units each buyer holds (for KEYS[i], ARGV[i])
-- Returns -1 when the sale is open (nothing written), else the keys raised.
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local n = 0
for i = 2, #KEYS do
  local cur = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  if tonumber(ARGV[i]) > cur then
    redis.call('SET', KEYS[i], ARGV[i], 'PXAT', ARGV[1])
    n = n + 1
  end
end
return n
