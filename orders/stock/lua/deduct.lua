-- Group commit of N >= 1 purchase attempts for ONE product, atomically.
-- Every write a purchase makes happens here, in the same script as the stock
-- deduction: buyer count (with its TTL), used token, order, outbox entry.
-- A crash can therefore never leave a deduction without its outbox entry.
--
-- KEYS[1] sk:{p}:stock   KEYS[2] sk:{p}:outbox   KEYS[3] sk:{p}:meta
-- then per attempt i = 0..N-1:
--   KEYS[4+3i] sk:{p}:u:<user>   KEYS[5+3i] sk:{p}:o:<orderId>   KEYS[6+3i] sk:{p}:t:<nonce>
-- ARGV[1] product   ARGV[2] buyer grace ms (after the sale end)   ARGV[3] order TTL ms
-- ARGV[4] "1": fence the sale when this server is not the one its meta was
-- verified on (real Redis; "0" for the embedded server, which has no run id)
-- then per attempt: ARGV[5+9i..13+9i] = user qty limit orderId price nowMs tokenTTLms node payByMs
-- and last, ARGV[5+9N], optional: "h" writes the orders as hashes, the older
-- layout (Options.OrderHashes, for a rolling upgrade); else strings (keys.go)
-- (payByMs 0: no pay deadline; recorded in the order and the outbox entry,
-- the deadline itself starts to count once the order is stored: mark_success.lua)
--
-- Returns {remaining, r_1, ..., r_N}; remaining is the stock after the
-- whole batch, -1 when the sale is not warmed, -2 when it is fenced (closed
-- for a ledger rebuild: Redis went back in time). r_i is the outbox entry id
-- (a string, "<ms>-<seq>") for a successful attempt, so that the edge can
-- delete the entry once Kafka acknowledged the order; otherwise an integer
-- code: 1 SOLD_OUT, 2 LIMIT_REACHED, 3 BAD_TOKEN, 4 NOT_READY, 5 RECOVERING
-- (0, OK, is never returned: an OK is its entry id).
-- Checks per attempt, in order: enough stock for qty, token unused, limit.
-- (SOLD_OUT wins over BAD_TOKEN/LIMIT_REACHED: all three write nothing.)
local n = (#KEYS - 3) / 3
local res = {0}
local function closed(remaining, code)
  res[1] = remaining
  for i = 2, n + 1 do res[i] = code end
  return res
end
local stock = redis.call('GET', KEYS[1])
if not stock then
  -- Not warmed (or Redis lost its memory): the sale stays closed. A missing
  -- key is neither 0 nor "unlimited". A fence says it is being rebuilt.
  if redis.call('HEXISTS', KEYS[3], 'recovering') == 1 then return closed(-2, 5) end
  return closed(-1, 4)
end
stock = tonumber(stock)
if stock <= 0 then
  -- Sold out: nothing can succeed, skip the per-attempt reads. (A sold-out
  -- answer writes nothing, so it needs no fence check.)
  return closed(stock, 1)
end
-- Buyer counts must outlive the sale, or a buyer could buy again once the
-- key expired; the end comes from the meta warm-up wrote.
local meta = redis.call('HMGET', KEYS[3], 'end', 'recovering', 'runid', 'tokens')
if meta[2] then return closed(-2, 5) end
if ARGV[4] == '1' then
  -- Went back in time? A restart (even from a snapshot) and a promoted
  -- replica run under a run id the sale was never verified on; the meta,
  -- restored or replicated, still names the old one. Fence the sale for
  -- every edge, atomically with the check, and sell nothing until the
  -- ledger has been consulted (~5 µs per call, shared by the whole batch).
  local id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  if id ~= meta[3] then
    redis.call('HSET', KEYS[3], 'recovering', ARGV[10] .. ':' .. ARGV[12] .. ':runid')
    return closed(-2, 5)
  end
end
local saleEnd = tonumber(meta[1] or '0') or 0
-- Tokens that expire before this were minted before the last rebuild: the
-- marks of the ones used in the lost window may be gone, so none of that
-- generation is honoured.
local tokensFrom = tonumber(meta[4] or '0') or 0
local product, grace, ottl, hashes = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[5 + 9 * n] == 'h'
local taken = 0
-- Redis time is the cost here (~1 µs per redis.call): a successful attempt
-- makes 5 calls (6 with OrderHashes), a rejected one at most 3, a sold-out
-- one none.
for i = 0, n - 1 do
  local k, a = 4 + 3 * i, 5 + 9 * i
  local qty = tonumber(ARGV[a + 1])
  local code = 0
  if stock < qty then
    -- Checked first: it writes nothing and needs no reads, and once the
    -- stock is gone it is every remaining attempt's answer.
    code = 1
  elseif tonumber(ARGV[a + 5]) + tonumber(ARGV[a + 6]) <= tokensFrom then
    code = 3
  elseif not redis.call('SET', KEYS[k + 2], '1', 'NX', 'PX', ARGV[a + 6]) then
    -- Check and mark the one-time token in one call.
    code = 3
  else
    -- bought + qty > limit, not bought >= limit: quantity counts.
    local bought = tonumber(redis.call('GET', KEYS[k]) or '0') + qty
    if bought > tonumber(ARGV[a + 2]) then
      code = 2
      redis.call('DEL', KEYS[k + 2]) -- a rejected attempt does not use up its token
    else
      stock = stock - qty
      taken = taken + qty
      local user, now = ARGV[a], tonumber(ARGV[a + 5])
      -- Value and TTL in one call: no buyer key without a TTL.
      redis.call('SET', KEYS[k], bought, 'PXAT', math.max(saleEnd, now) + grace)
      if hashes then
        redis.call('HSET', KEYS[k + 1], 'state', 'pending', 'user', user, 'qty', ARGV[a + 1],
          'price', ARGV[a + 4], 'created', ARGV[a + 5], 'node', ARGV[a + 7], 'payby', ARGV[a + 8])
        redis.call('PEXPIRE', KEYS[k + 1], ottl)
      else
        -- The order, value and TTL in one call (keys.go, "sk:{p}:o:"): the
        -- state is its first byte, so the consumer's mark is one SETRANGE.
        redis.call('SET', KEYS[k + 1], 'p:' .. user .. ':' .. ARGV[a + 1] .. ':' .. ARGV[a + 4] .. ':' ..
          ARGV[a + 5] .. ':' .. ARGV[a + 7] .. ':' .. ARGV[a + 8], 'PX', ottl)
      end
      code = redis.call('XADD', KEYS[2], '*', 'order', ARGV[a + 3], 'product', product, 'user', user,
        'qty', ARGV[a + 1], 'price', ARGV[a + 4], 'created', ARGV[a + 5], 'node', ARGV[a + 7], 'payby', ARGV[a + 8])
    end
  end
  res[i + 2] = code
end
-- One write of the stock key for the whole batch.
if taken > 0 then redis.call('DECRBY', KEYS[1], taken) end
res[1] = stock
return res
