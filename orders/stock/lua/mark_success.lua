-- Marks orders stored by the consumer as success, only from pending: a late
-- or redelivered store event must not resurrect a released order. An order
-- with a pay deadline (payby > 0) enters the due set as it becomes success:
-- from then on the deadline sweep (settle.go, lua/release.lua) may expire it.
-- KEYS[1] sk:{p}:due   KEYS[2..1+B] the order bucket hashes sk:{p}:ob:<bucket>
-- the orders fall in (ledger "b")
-- ARGV[1] B, ARGV[2] the order keys' prefix sk:{p}:o: (keys.go; an order
-- not in its bucket is looked for at that prefix + its id: the per-order
-- ledger), then per order i = 0..N-1: ARGV[3+2i] its id, ARGV[4+2i] its
-- bucket (1..B). Returns how many changed. No key and nothing constant
-- goes per order: Redis pays for every string of a call.
-- (order_fn.lua is prepended: every layout of an order is read.)
--
-- Redis' cost is per call, so a batch costs one HMGET and one HSET per
-- bucket (ledger "b") and one ZADD; an order of the per-order ledger one
-- GET and one SETRANGE.
local n = (#ARGV - 2) / 2
local changed = 0
local due = {}
-- The bucket fields, one HMGET per bucket.
local ids, at = {}, {} -- bucket -> ids; order i -> its position in ids
for i = 0, n - 1 do
  local b = tonumber(ARGV[4 + 2 * i])
  local f = ids[b]
  if not f then f = {}; ids[b] = f end
  f[#f + 1] = ARGV[3 + 2 * i]
  at[i] = #f
end
local vals, marks, seen = {}, {}, {}
for b, f in pairs(ids) do vals[b] = redis.call('HMGET', KEYS[1 + b], unpack(f)) end
for i = 0, n - 1 do
  local id, b = ARGV[3 + 2 * i], tonumber(ARGV[4 + 2 * i])
  local v = vals[b][at[i]]
  local user, payby
  if v then
    -- Read before any mark is written: an id given twice (a retried
    -- batch beside a new one) is marked once.
    if string.byte(v, 1) == 112 and not seen[id] then -- 'p'
      seen[id] = true
      local w = marks[b]
      if not w then w = {}; marks[b] = w end
      w[#w + 1] = id
      w[#w + 1] = 's' .. string.sub(v, 2)
      changed = changed + 1
      user, payby = string.match(v, '^p:([^:]+):[^:]*:[^:]*:[^:]*:[^:]*:(%d+)')
    end
  else
    local k = ARGV[2] .. id
    -- The string layout: one GET, and the mark is its first byte
    -- (SETRANGE keeps the TTL and rewrites nothing else).
    local s = redis.pcall('GET', k)
    if type(s) == 'string' then
      if string.byte(s, 1) == 112 then
        redis.call('SETRANGE', k, 0, 's')
        changed = changed + 1
        user, payby = string.match(s, '^p:([^:]+):[^:]*:[^:]*:[^:]*:[^:]*:(%d+)')
      end
    elseif s then
      -- WRONGTYPE (anything else is raised): an older edge's hash.
      local o = order_read(k)
      if o and o[1] == 'pending' then
        redis.call('HSET', k, 'state', 'success')
        changed = changed + 1
        user, payby = o[2], o[7]
      end
    end
  end
  -- The deadline goes to ZADD as the text read (a Lua number would be
  -- formatted back into text): digits, "0" for none.
  if payby and payby ~= '0' then
    due[#due + 1] = payby
    due[#due + 1] = id .. ':' .. user
  end
end
-- One HSET per bucket (the hash keeps its TTL), one ZADD for the whole
-- batch (unpack is bounded by Lua's stack: MarkSuccess's chunks stay far
-- below it).
for b, w in pairs(marks) do redis.call('HSET', KEYS[1 + b], unpack(w)) end
if #due > 0 then redis.call('ZADD', KEYS[1], unpack(due)) end
return changed
