-- Group commit of N >= 1 purchase attempts for ONE product, atomically.
-- Every write a purchase makes happens here, in the same script as the stock
-- deduction: buyer count (with its TTL), used token, order, outbox entry.
-- A crash can therefore never leave a deduction without its outbox entry.
--
-- KEYS[1] sk:{p}:stock   KEYS[2] sk:{p}:outbox   KEYS[3] sk:{p}:meta
-- ARGV[1] product   ARGV[2] buyer grace ms (after the sale end)   ARGV[3] order TTL ms
-- ARGV[4] "1": fence the sale when this server is not the one its meta was
-- verified on (real Redis; "0" for the embedded server, which has no run id)
--
-- Two call shapes. This version's edges send the lean one (Store.Deduct):
-- KEYS[4..19] sk:{p}:b:0 .. sk:{p}:b:15 (the buyer hashes), then the T
-- used-token hashes sk:{p}:tk:<bucket>, then the B order buckets
-- sk:{p}:ob:<bucket>; ARGV[5] "h" writes per-order orders as hashes, the
-- older layout (Options.OrderHashes, for a rolling upgrade), "s" strings
-- (keys.go); ARGV[6..8] the per-key name prefixes sk:{p}:u: sk:{p}:o:
-- sk:{p}:t: (keys.go builds them; the script appends the user, order id or
-- nonce only for a sale of the per-key layouts); ARGV[9] T, ARGV[10] B,
-- ARGV[11..10+B] the unix ms each order bucket may expire at (its end +
-- order TTL); then per attempt i = 0..N-1 nine strings from
-- ARGV[11+B+9i]: user qty limit orderId value nowMs tokenTTLms nonce pos,
-- where value is the order's "<user>:<qty>:<price>:<created>:<node>:<payby>"
-- made on the edge (created = nowMs; payby 0: no pay deadline, recorded in
-- the order and the outbox entry, the deadline itself starts to count once
-- the order is stored: mark_success.lua) and pos its hashes' positions in
-- one number, b + 16 * (t - 1) + 16 * T * (o - 1): buyer hash b (0..15,
-- KEYS[4+b]), token hash t (1..T), order bucket o (1..B). No key and
-- nothing constant per call goes per attempt: Redis pays for every string
-- of a call (docs/ledger.md, "What a purchase costs Redis").
--
-- The older shape (bench's redis-benchmark and OpenResty peers, built by
-- DeductCall) has no buyer hashes: per attempt KEYS sk:{p}:u:<user>
-- sk:{p}:o:<orderId> sk:{p}:t:<nonce> from KEYS[4], and ARGV[5+9i..13+9i]
-- = user qty limit orderId price nowMs tokenTTLms node payByMs, then
-- ARGV[5+9N], optional, "h" as above. It can only serve a sale of the
-- per-key buyers and the per-order ledger.
--
-- The orders and the outbox follow the sale's ledger (keys.go), the meta's
-- "ledger": "b" one HSET per order bucket and ONE outbox entry for the whole
-- call, carrying all of its orders (field "orders"; every successful
-- attempt's answer is then "<entry id>/<orders in it>", AckOutbox removes
-- the entry once all of them are acknowledged); absent one order key and
-- one outbox entry per order.
--
-- The buyer counts and used tokens follow the sale's layout (keys.go), the
-- meta's "layout": "2" the hashes, absent the per-key keys. The edge passes
-- both layouts' keys; a call of the older shape (no buyer hashes: the bench
-- and the OpenResty peer call the script that way) can only serve a per-key
-- sale, and is an error on a "2" one.
--
-- Returns, to a lean call, {remaining, codes, ids...}: codes one digit per
-- attempt, or the integer 0 when every attempt succeeded; ids the outbox entry ids of the successful attempts (ledger "b":
-- one, "<entry id>/<orders in it>", the answer of every successful
-- attempt; else one "<ms>-<seq>" per successful attempt, in order); to an
-- older call {remaining, r_1, ..., r_N}, r_i a successful attempt's entry
-- id or else its code. remaining is the stock after the whole batch, -1
-- when the sale is not warmed, -2 when it is fenced (closed for a ledger
-- rebuild: Redis went back in time). The codes: 0 OK, 1 SOLD_OUT,
-- 2 LIMIT_REACHED, 3 BAD_TOKEN, 4 NOT_READY, 5 RECOVERING (an older
-- call's OK is its entry id, never 0).
-- Checks per attempt, in order: enough stock for qty, the token generation
-- (meta tokens), token unused, limit; in both layouts.
-- (SOLD_OUT wins over BAD_TOKEN/LIMIT_REACHED: all three write nothing.)
-- The call's shape: the buyer hashes' names follow the fixed keys. (A
-- per-key buyer key is sk:{p}:u:..., never sk:{p}:b:0.)
local pre = string.sub(KEYS[1], 1, -6) -- sk:{p}: ("stock" off)
local lean = #KEYS >= 19 and KEYS[4] == pre .. 'b:0'
local digit = {[0] = '0', '1', '2', '3', '4', '5'}
-- A: the attempts' strings, nine each from A[base + 9i] as a lean call
-- sends them (an older call's are laid out so once, below).
local A, base, n, nt, hashes
if lean then
  nt = tonumber(ARGV[9])
  A, base, hashes = ARGV, 11 + tonumber(ARGV[10]), ARGV[5] == 'h'
  n = (#ARGV - base + 1) / 9
else
  n = (#KEYS - 3) / 3
  A, base, hashes = {}, 1, ARGV[5 + 9 * n] == 'h'
  for i = 0, n - 1 do
    local a, o = 5 + 9 * i, 9 * i
    A[o + 1], A[o + 2], A[o + 3], A[o + 4] = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
    A[o + 5] = ARGV[a] .. ':' .. ARGV[a + 1] .. ':' .. ARGV[a + 4] .. ':' .. ARGV[a + 5] .. ':' .. ARGV[a + 7] .. ':' .. ARGV[a + 8]
    A[o + 6], A[o + 7], A[o + 8], A[o + 9] = ARGV[a + 5], ARGV[a + 6], '', '0'
  end
end
-- The per-key names of attempt i (the sale's layout is per key).
local function buyerKey(i, a)
  if lean then return ARGV[6] .. A[a] end
  return KEYS[4 + 3 * i]
end
local function orderKey(i, a)
  if lean then return ARGV[7] .. A[a + 3] end
  return KEYS[5 + 3 * i]
end
local function tokenKey(i, a)
  if lean then return ARGV[8] .. A[a + 7] end
  return KEYS[6 + 3 * i]
end
local res = {0}
local function closed(remaining, code)
  res[1] = remaining
  if lean then
    res[2] = string.rep(digit[code], n)
  else
    for i = 2, n + 1 do res[i] = code end
  end
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
    -- The fence id (FenceID): the first attempt's now and node (the
    -- node is the order value's fifth field).
    local node = string.match(A[base + 4], '^[^:]*:[^:]*:[^:]*:[^:]*:([^:]*)')
    redis.call('HSET', KEYS[3], 'recovering', A[base + 5] .. ':' .. node .. ':runid')
    return closed(-2, 5)
  end
end
local hashed, batched = meta[5] == '2', meta[6] == 'b'
-- A ledger this version does not know is a later version's: its orders
-- would be where this version never looks. Closed, nothing written.
if meta[6] and not batched then return closed(-1, 4) end
if (hashed or batched) and not lean then
  return redis.error_reply('deduct.lua: the sale keeps its buyers and tokens or its orders in hashes; the call names none')
end
local saleEnd = tonumber(meta[1] or '0') or 0
-- Tokens that expire before this were minted before the last rebuild: the
-- marks of the ones used in the lost window may be gone, so none of that
-- generation is honoured.
local tokensFrom = tonumber(meta[4] or '0') or 0
local product, grace, ottl = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local taken = 0
local codes = {} -- codes[i + 1]: attempt i's digit

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
  local qtys, exps, bs, ts = {}, {}, {}, {}
  local users, nonces = {}, {} -- hash -> fields to read
  for i = 0, n - 1 do
    local a = base + 9 * i
    local qty, exp = tonumber(A[a + 1]), tonumber(A[a + 5]) + tonumber(A[a + 6])
    qtys[i], exps[i] = qty, exp
    if qty <= stock and exp > tokensFrom then
      local pos = tonumber(A[a + 8])
      local b, t = pos % 16, math.floor(pos / 16) % nt + 1
      bs[i], ts[i] = b, t
      local f = users[b]
      if not f then f = {}; users[b] = f end
      f[#f + 1] = A[a]
      f = nonces[t]
      if not f then f = {}; nonces[t] = f end
      f[#f + 1] = A[a + 7]
    end
  end
  local bought, used = {}, {} -- user -> units; token hash -> {nonce -> true}
  for b, f in pairs(users) do
    local v = redis.call('HMGET', KEYS[4 + b], unpack(f))
    for j = 1, #f do bought[f[j]] = tonumber(v[j] or '0') end
  end
  for t, f in pairs(nonces) do
    local v = redis.call('HMGET', KEYS[19 + t], unpack(f))
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
    local a, qty = base + 9 * i, qtys[i]
    local code = 0
    if stock < qty then
      code = 1
    elseif exps[i] <= tokensFrom then
      code = 3
    else
      local t, user, nc = ts[i], A[a], A[a + 7]
      local count = bought[user] + qty
      if used[t][nc] then
        code = 3
      elseif count > tonumber(A[a + 2]) then
        code = 2 -- nothing written: the token stays unused
      else
        used[t][nc] = true
        bought[user] = count
        local b = bs[i]
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
        local now = tonumber(A[a + 5])
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
    codes[i + 1] = digit[code]
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
    local key = KEYS[19 + t]
    redis.call('HSET', key, unpack(w))
    redis.call('PEXPIRE', key, tokenEnd[t], 'NX')
  end
else
  for i = 0, n - 1 do
    local a = base + 9 * i
    local qty = tonumber(A[a + 1])
    local code = 0
    if stock < qty then
      -- Checked first: it writes nothing and needs no reads, and once the
      -- stock is gone it is every remaining attempt's answer.
      code = 1
    elseif tonumber(A[a + 5]) + tonumber(A[a + 6]) <= tokensFrom then
      code = 3
    else
      local tk = tokenKey(i, a)
      if not redis.call('SET', tk, '1', 'NX', 'PX', A[a + 6]) then
        -- Check and mark the one-time token in one call.
        code = 3
      else
        -- bought + qty > limit, not bought >= limit: quantity counts.
        local uk = buyerKey(i, a)
        local count = tonumber(redis.call('GET', uk) or '0') + qty
        if count > tonumber(A[a + 2]) then
          code = 2
          redis.call('DEL', tk) -- a rejected attempt does not use up its token
        else
          stock = stock - qty
          taken = taken + qty
          -- Value and TTL in one call: no buyer key without a TTL.
          redis.call('SET', uk, count, 'PXAT', math.max(saleEnd, tonumber(A[a + 5])) + grace)
          ok[#ok + 1] = i
        end
      end
    end
    codes[i + 1] = digit[code]
  end
end

-- The orders and their outbox entries. ids: the answers of the successful
-- attempts, in order.
local ids = {}
if batched then
  -- Per order bucket one HSET of its orders (the string layout's values)
  -- and its expiry: NX gives a new hash one, GT lengthens an older one's
  -- to cover these orders' OrderTTL (never shortening what a rebuild or
  -- another edge gave it); then one outbox entry for the whole call.
  local wo, rec = {}, {}
  local per = 16 * nt
  for j = 1, #ok do
    local a = base + 9 * ok[j]
    local v, id = A[a + 4], A[a + 3]
    local ob = math.floor(tonumber(A[a + 8]) / per) + 1
    local w = wo[ob]
    if not w then w = {}; wo[ob] = w end
    w[#w + 1] = id
    w[#w + 1] = 'p:' .. v
    rec[j] = id .. ':' .. v
  end
  for ob, w in pairs(wo) do
    local key = KEYS[19 + nt + ob]
    redis.call('HSET', key, unpack(w))
    local at = ARGV[10 + ob]
    redis.call('PEXPIREAT', key, at, 'NX')
    redis.call('PEXPIREAT', key, at, 'GT')
  end
  if #ok > 0 then
    ids[1] = redis.call('XADD', KEYS[2], '*', 'product', product, 'orders', table.concat(rec, ';')) .. '/' .. #ok
  end
else
  for j = 1, #ok do
    local i = ok[j]
    local a = base + 9 * i
    local user, ok_, id = A[a], orderKey(i, a), A[a + 3]
    local v = A[a + 4]
    local _, qty, price, created, node, payby = string.match(v, '^([^:]*):([^:]*):([^:]*):([^:]*):([^:]*):([^:]*)$')
    if hashes then
      redis.call('HSET', ok_, 'state', 'pending', 'user', user, 'qty', qty,
        'price', price, 'created', created, 'node', node, 'payby', payby)
      redis.call('PEXPIRE', ok_, ottl)
    else
      -- The order, value and TTL in one call (keys.go, "sk:{p}:o:"): the
      -- state is its first byte, so the consumer's mark is one SETRANGE.
      redis.call('SET', ok_, 'p:' .. v, 'PX', ottl)
    end
    ids[j] = redis.call('XADD', KEYS[2], '*', 'order', id, 'product', product, 'user', user,
      'qty', qty, 'price', price, 'created', created, 'node', node, 'payby', payby)
  end
end
-- One write of the stock key for the whole batch.
if taken > 0 then redis.call('DECRBY', KEYS[1], taken) end
res[1] = stock
if lean then
  if #ok == n then res[2] = 0 else res[2] = table.concat(codes) end
  for j = 1, #ids do res[j + 2] = ids[j] end
  return res
end
local j = 0
for i = 1, n do
  local c = codes[i]
  if c == '0' then
    j = j + 1
    res[i + 1] = ids[j]
  else
    res[i + 1] = tonumber(c)
  end
end
return res
