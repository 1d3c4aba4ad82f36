-- A shopper joins a sale's waiting room: one ticket per shopper per sale.
-- KEYS: 1 sk:{p}:wr (the room's state), 2 sk:{p}:wr:u:<user>, 3 sk:{p}:wr:pre
-- (the pre-queue's ticket ids), 4 sk:{p}:wr:c:<challenge id> (the proof of
-- work's single use; ARGV[7] = 0 when there is none), 5 sk:{p}:wr:rank,
-- 6 sk:{p}:wr:active
-- ARGV: 1 now ms (the edge's), 2 the sale's start ms, 3 a new ticket id,
-- 4 a new lottery key (hex), 5 its commit, 6 expire-at ms of every key,
-- 7 challenge (1/0), 8 lottery (1/0), 9 the challenge's expiry ms (its
-- single use is remembered until then; afterwards it is refused as expired),
-- 10 max active, 11 session ms, 12 the configured rate per minute
-- Returns {result, ticket id, then place()'s answer (room_place_fn.lua, which
-- Go prepends)}: result 1 joined now, 0 joined before (the same place;
-- nothing changed), -1 the queue is closed, -2 the challenge was used
-- before (these two alone). The place is answered in the same call, so a
-- join is one round trip.
local function answer(result, id)
  local p = place(KEYS[1], KEYS[2], KEYS[5], KEYS[6], KEYS[3],
    {ARGV[1], id, ARGV[10], ARGV[11], ARGV[6], ARGV[2], ARGV[12]})
  return {result, id, unpack(p)}
end
local old = redis.call('HGET', KEYS[2], 'id')
if old then
  return answer(0, old)
end
if redis.call('HGET', KEYS[1], 'closed') == '1' then
  return {-1}
end
local exp = tonumber(ARGV[6])
if ARGV[7] == '1' then
  if not redis.call('SET', KEYS[4], '1', 'NX', 'PX', math.max(tonumber(ARGV[9]) - tonumber(ARGV[1]), 1000)) then
    return {-2}
  end
end
local seq = 0
if ARGV[8] == '1' and redis.call('HGET', KEYS[1], 'frozen') ~= '1' and tonumber(ARGV[1]) < tonumber(ARGV[2]) then
  -- The lottery's key exists from the first join on (or the edges' check
  -- when the pre-queue opens), so its commit is public before anyone is
  -- ranked by it.
  if redis.call('HSETNX', KEYS[1], 'key', ARGV[4]) == 1 then
    redis.call('HSET', KEYS[1], 'commit', ARGV[5])
  end
  redis.call('SADD', KEYS[3], ARGV[3])
  redis.call('PEXPIREAT', KEYS[3], exp)
else
  seq = redis.call('HINCRBY', KEYS[1], 'fifo', 1)
end
redis.call('HINCRBY', KEYS[1], 'joined', 1)
redis.call('PEXPIREAT', KEYS[1], exp)
redis.call('HSET', KEYS[2], 'id', ARGV[3], 'seq', seq)
redis.call('PEXPIREAT', KEYS[2], exp)
return answer(1, ARGV[3])
