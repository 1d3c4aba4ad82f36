-- Group commit of N >= 1 purchase attempts for ONE product, atomically.
-- Every write a purchase makes happens here, in the same script as the stock
-- deduction: buyer count (with its TTL), used token, order, outbox entry.
-- A crash can therefore never leave a deduction without its outbox entry.
--
-- KEYS[1] sk:{p}:stock   KEYS[2] sk:{p}:outbox   KEYS[3] sk:{p}:meta
-- then, from this version's edges, KEYS[4..19] sk:{p}:b:0 .. sk:{p}:b:15
-- (the buyer hashes; absent from a call of the older shape, see below)
-- then per attempt i = 0..N-1 (K = 4, or 20 with the buyer hashes):
--   KEYS[K+3i] sk:{p}:u:<user>   KEYS[K+1+3i] sk:{p}:o:<orderId>   KEYS[K+2+3i] sk:{p}:t:<nonce>
-- then, with the buyer hashes, the batch's used-token hashes sk:{p}:tk:<bucket>
-- ARGV[1] product   ARGV[2] buyer grace ms (after the sale end)   ARGV[3] order TTL ms
-- ARGV[4] "1": fence the sale when this server is not the one its meta was
-- verified on (real Redis; "0" for the embedded server, which has no run id)
-- then per attempt: ARGV[5+9i..13+9i] = user qty limit orderId price nowMs tokenTTLms node payByMs
-- and then ARGV[5+9N], optional: "h" writes the orders as hashes, the older
-- layout (Options.OrderHashes, for a rolling upgrade); else strings (keys.go)
-- (payByMs 0: no pay deadline; recorded in the order and the outbox entry,
-- the deadline itself starts to count once the order is stored: mark_success.lua)
-- With the buyer hashes ARGV[5+9N] is there, and per attempt
-- ARGV[6+9N+3i] its buyer hash (0..15: KEYS[4+that]), ARGV[7+9N+3i] its
-- token hash (1..: the one-based position among the token hashes) and
-- ARGV[8+9N+3i] its order bucket (1..: the position among the order
-- buckets); then per order bucket j = 1..B the unix ms its hash may expire
-- at (the bucket's end + order TTL), and last B. The order buckets' names
-- sk:{p}:ob:<bucket> are the last B keys, after the token hashes.
--
-- The orders and the outbox follow the sale's ledger (keys.go), the meta's
-- "ledger": "b" one HSET per order bucket and ONE outbox entry for the whole
-- call, carrying all of its orders (field "orders"; r_i is then
-- "<entry id>/<orders in it>" for every successful attempt, AckOutbox
-- removes the entry once all of them are acknowledged); absent one order
-- key and one outbox entry per order. A call of the older shape can only
-- serve a sale of the per-key buyers and per-order ledger.
--
-- The buyer counts and used tokens follow the sale's layout (keys.go), the
-- meta's "layout": "2" the hashes, absent the per-key keys. The edge passes
-- both layouts' keys; a call of the older shape (no buyer hashes: the bench
-- and the OpenResty peer call the script that way) can only serve a per-key
-- sale, and is an error on a "2" one.
--
-- Returns {remaining, r_1, ..., r_N}; remaining is the stock after the
-- whole batch, -1 when the sale is not warmed, -2 when it is fenced (closed
-- for a ledger rebuild: Redis went back in time). r_i is the outbox entry id
-- (a string, "<ms>-<seq>") for a successful attempt, so that the edge can
-- delete the entry once Kafka acknowledged the order; otherwise an integer
-- code: 1 SOLD_OUT, 2 LIMIT_REACHED, 3 BAD_TOKEN, 4 NOT_READY, 5 RECOVERING
-- (0, OK, is never returned: an OK is its entry id).
-- Checks per attempt, in order: enough stock for qty, the token generation
-- (meta tokens), token unused, limit; in both layouts.
-- (SOLD_OUT wins over BAD_TOKEN/LIMIT_REACHED: all three write nothing.)
-- The call's shape: the buyer hashes' names follow the fixed keys. (A
-- per-key buyer key is sk:{p}:u:..., never sk:{p}:b:0.)
local pre = string.sub(KEYS[1], 1, -6) -- sk:{p}: ("stock" off)
local shaped = #KEYS >= 19 and KEYS[4] == pre .. 'b:0'
local n, kb, nb = (#KEYS - 3) / 3, 4, 0
if shaped then
  nb = tonumber(ARGV[#ARGV])
  n, kb = (#ARGV - 6 - nb) / 12, 20
end
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
local meta = redis.call('HMGET', KEYS[3], 'end', 'recovering', 'runid', 'tokens', 'layout', 'ledger')
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
local hashed, batched = meta[5] == '2', meta[6] == 'b'
-- A ledger this version does not know is a later version's: its orders
-- would be where this version never looks. Closed, nothing written.
if meta[6] and not batched then return closed(-1, 4) end
if (hashed or batched) and not shaped then
  return redis.error_reply('deduct.lua: the sale keeps its buyers and tokens or its orders in hashes; the call names none')
end
local saleEnd = tonumber(meta[1] or '0') or 0
-- Tokens that expire before this were minted before the last rebuild: the
-- marks of the ones used in the lost window may be gone, so none of that
-- generation is honoured.
local tokensFrom = tonumber(meta[4] or '0') or 0
local product, grace, ottl, hashes = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[5 + 9 * n] == 'h'
local tail = 6 + 9 * n -- ARGV[tail+3i] buyer hash, ARGV[tail+1+3i] token hash, ARGV[tail+2+3i] order bucket
local nonceAt = #pre + 3 -- sk:{p}:t:<nonce>
local taken = 0

-- Redis time is the cost here (~1 µs per redis.call): per-key, a
-- successful attempt makes 5 calls (6 with OrderHashes), a rejected one at
-- most 3, a sold-out one none; layout "2" makes 2 per successful attempt
-- (order, outbox entry) and 3 per hash the batch touches; with ledger "b"
-- too, none per attempt: 3 per order bucket and one outbox entry a call.
local ok = {} -- the successful attempts' i, in queue order
if hashed then
  -- The batch's counts and marks, one HMGET per hash it touches, into Lua
  -- tables that the attempts then read and update in queue order, so that
  -- a user's second attempt sees her first, and a token's second use its
  -- first. Only attempts that can get past the stock and generation checks
  -- are read (the same tests as below: the stock only falls). Each
  -- attempt's numbers are parsed once.
  local qtys, exps, nonce = {}, {}, {}
  local users, nonces = {}, {} -- hash -> fields to read
  for i = 0, n - 1 do
    local a = 5 + 9 * i
    local qty, exp = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 5]) + tonumber(ARGV[a + 6])
    qtys[i], exps[i] = qty, exp
    if qty <= stock and exp > tokensFrom then
      local b, t, nc = ARGV[tail + 3 * i], ARGV[tail + 1 + 3 * i], string.sub(KEYS[kb + 2 + 3 * i], nonceAt)
      nonce[i] = nc
      local f = users[b]
      if not f then f = {}; users[b] = f end
      f[#f + 1] = ARGV[a]
      f = nonces[t]
      if not f then f = {}; nonces[t] = f end
      f[#f + 1] = nc
    end
  end
  local bought, used = {}, {} -- user -> units; token hash -> {nonce -> true}
  for b, f in pairs(users) do
    local v = redis.call('HMGET', KEYS[4 + b], unpack(f))
    for j = 1, #f do bought[f[j]] = tonumber(v[j] or '0') end
  end
  for t, f in pairs(nonces) do
    local v = redis.call('HMGET', KEYS[19 + 3 * n + t], unpack(f))
    local u = {}
    for j = 1, #f do u[f[j]] = v[j] and true or nil end
    used[t] = u
  end
  -- The checks. What the batch writes: per buyer hash {user, count, ...}
  -- (a user's slot found by at[user], so that her last count is written
  -- once), per token hash {nonce, "1", ...}.
  local wb, at, wt = {}, {}, {}
  local newest = 0 -- the latest now of a successful attempt (the buyers' TTL)
  local tokenEnd = {} -- token hash -> its bucket's end, ms from the edge's now
  for i = 0, n - 1 do
    local a, qty = 5 + 9 * i, qtys[i]
    local code = 0
    if stock < qty then
      code = 1
    elseif exps[i] <= tokensFrom then
      code = 3
    else
      local t, user, nc = ARGV[tail + 1 + 3 * i], ARGV[a], nonce[i]
      local count = bought[user] + qty
      if used[t][nc] then
        code = 3
      elseif count > tonumber(ARGV[a + 2]) then
        code = 2 -- nothing written: the token stays unused
      else
        used[t][nc] = true
        bought[user] = count
        local b = ARGV[tail + 3 * i]
        local w = wb[b]
        if not w then w = {}; wb[b] = w end
        local j = at[user]
        if not j then
          j = #w + 1
          at[user] = j
          w[j] = user
        end
        w[j + 1] = count
        w = wt[t]
        local now = tonumber(ARGV[a + 5])
        if not w then
          w = {}; wt[t] = w
          -- The mark lives until its bucket (10 s of expiry times,
          -- keys.go's tokenBucketMs) ends, counted on the edge's clock as
          -- the token's expiry is (the per-token key's PX): it outlives
          -- every token of the bucket.
          tokenEnd[t] = (math.floor(exps[i] / 10000) + 1) * 10000 - now
        end
        w[#w + 1] = nc
        w[#w + 1] = '1'
        if now > newest then newest = now end
        ok[#ok + 1] = i
      end
    end
    if code == 0 then
      stock = stock - qty
      taken = taken + qty
    end
    res[i + 2] = code
  end
  -- The counts and marks, one HSET and one expiry per hash written, before
  -- the orders: no hash without a TTL, and the buyers' TTL is the per-key
  -- one (sale end + grace). A token hash keeps the first expiry it got
  -- (NX): settle_unknown.lua may have made it live longer.
  local exp = math.max(saleEnd, newest) + grace
  for b, w in pairs(wb) do
    redis.call('HSET', KEYS[4 + b], unpack(w))
    redis.call('PEXPIREAT', KEYS[4 + b], exp)
  end
  for t, w in pairs(wt) do
    local key = KEYS[19 + 3 * n + t]
    redis.call('HSET', key, unpack(w))
    redis.call('PEXPIRE', key, tokenEnd[t], 'NX')
  end
else
  for i = 0, n - 1 do
    local k, a = kb + 3 * i, 5 + 9 * i
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
      local count = tonumber(redis.call('GET', KEYS[k]) or '0') + qty
      if count > tonumber(ARGV[a + 2]) then
        code = 2
        redis.call('DEL', KEYS[k + 2]) -- a rejected attempt does not use up its token
      else
        stock = stock - qty
        taken = taken + qty
        -- Value and TTL in one call: no buyer key without a TTL.
        redis.call('SET', KEYS[k], count, 'PXAT', math.max(saleEnd, tonumber(ARGV[a + 5])) + grace)
        ok[#ok + 1] = i
      end
    end
    res[i + 2] = code
  end
end

-- The orders and their outbox entries.
if batched then
  -- Per order bucket one HSET of its orders (the string layout's values)
  -- and its expiry: NX gives a new hash one, GT lengthens an older one's
  -- to cover these orders' OrderTTL (never shortening what a rebuild or
  -- another edge gave it); then one outbox entry for the whole call.
  local wo, rec = {}, {}
  for j = 1, #ok do
    local i = ok[j]
    local a = 5 + 9 * i
    local v = ARGV[a] .. ':' .. ARGV[a + 1] .. ':' .. ARGV[a + 4] .. ':' .. ARGV[a + 5] .. ':' ..
      ARGV[a + 7] .. ':' .. ARGV[a + 8]
    local ob = tonumber(ARGV[tail + 2 + 3 * i])
    local w = wo[ob]
    if not w then w = {}; wo[ob] = w end
    w[#w + 1] = ARGV[a + 3]
    w[#w + 1] = 'p:' .. v
    rec[j] = ARGV[a + 3] .. ':' .. v
  end
  for ob, w in pairs(wo) do
    local key = KEYS[#KEYS - nb + ob]
    redis.call('HSET', key, unpack(w))
    local at = ARGV[#ARGV - nb - 1 + ob]
    redis.call('PEXPIREAT', key, at, 'NX')
    redis.call('PEXPIREAT', key, at, 'GT')
  end
  if #ok > 0 then
    local share = redis.call('XADD', KEYS[2], '*', 'product', product, 'orders', table.concat(rec, ';')) .. '/' .. #ok
    for j = 1, #ok do res[ok[j] + 2] = share end
  end
  ok = {}
end
for j = 1, #ok do
  local i = ok[j]
  local k, a = kb + 3 * i, 5 + 9 * i
  local user = ARGV[a]
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
  res[i + 2] = redis.call('XADD', KEYS[2], '*', 'order', ARGV[a + 3], 'product', product, 'user', user,
    'qty', ARGV[a + 1], 'price', ARGV[a + 4], 'created', ARGV[a + 5], 'node', ARGV[a + 7], 'payby', ARGV[a + 8])
end
-- One write of the stock key for the whole batch.
if taken > 0 then redis.call('DECRBY', KEYS[1], taken) end
res[1] = stock
return res
