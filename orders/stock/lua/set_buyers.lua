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
-- The layout (keys.go) is the meta's. Per-key: a count of 0 removes the
-- key. Hashes: the first call of a rebuild (the meta's buyersset is not
-- its fence yet) clears all 16 buyer hashes, then every call writes its
-- counts (0: none), so that the hashes hold exactly the ledger's buyers; a
-- second rebuild of the same fence (a lock that expired) finds buyersset
-- set and clears nothing another one of its calls wrote. A sale whose meta
-- was lost with Redis' memory (only the fence is left: no "initial") takes
-- the layout ARGV[3] here, before anything is written, as warm-up would
-- have given it; a sale whose meta survived keeps its own.
--
-- KEYS[1] sk:{p}:meta   KEYS[2..17] sk:{p}:b:0 .. sk:{p}:b:15
-- KEYS[18..] per buyer i = 0..n-1: KEYS[18+i] sk:{p}:u:<user>
-- ARGV[1] the fence   ARGV[2] expiry, unix ms (PXAT; the sale's end + buyer grace)
-- ARGV[3] the layout for a lost meta ("2" or "")
-- ARGV[4+3i] the units buyer i holds (0: none)   ARGV[5+3i] the user
-- ARGV[6+3i] her buyer hash (0..15: KEYS[2+that])
-- Returns -1 when the fence is not ARGV[1] (nothing written), else the
-- counts changed (per-key: a key that already holds its count keeps it,
-- and its TTL) or written (hashes).
local meta = redis.call('HMGET', KEYS[1], 'recovering', 'layout', 'initial', 'buyersset')
if meta[1] ~= ARGV[1] then return -1 end
local layout = meta[2]
if not layout and not meta[3] and ARGV[3] == '2' then
  layout = '2'
  redis.call('HSET', KEYS[1], 'layout', '2')
end
local n = 0
if layout == '2' then
  if meta[4] ~= ARGV[1] then
    for b = 2, 17 do redis.call('UNLINK', KEYS[b]) end -- big hashes freed off the main thread
    redis.call('HSET', KEYS[1], 'buyersset', ARGV[1])
  end
  local fv = {} -- buyer hash -> {user, count, ...}
  for i = 0, #KEYS - 18 do
    local want = ARGV[4 + 3 * i]
    local b = tonumber(ARGV[6 + 3 * i])
    if tonumber(want) > 0 then
      local f = fv[b]
      if not f then f = {}; fv[b] = f end
      f[#f + 1] = ARGV[5 + 3 * i]
      f[#f + 1] = want
      n = n + 1
    else
      n = n + redis.call('HDEL', KEYS[2 + b], ARGV[5 + 3 * i])
    end
  end
  for b, f in pairs(fv) do
    redis.call('HSET', KEYS[2 + b], unpack(f))
    redis.call('PEXPIREAT', KEYS[2 + b], ARGV[2])
  end
  return n
end
for i = 18, #KEYS do
  local want, cur = ARGV[4 + 3 * (i - 18)], redis.call('GET', KEYS[i])
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
