-- A shopper joins a sale's waiting room: one ticket per shopper per sale.
-- KEYS: 1 sk:{p}:wr (the room's state), 2 sk:{p}:wr:u:<user>, 3 sk:{p}:wr:pre
-- (the pre-queue's ticket ids), 4 sk:{p}:wr:c:<challenge id> (the proof of
-- work's single use; ARGV[7] = 0 when there is none)
-- ARGV: 1 now ms (the edge's), 2 the sale's start ms, 3 a new ticket id,
-- 4 a new lottery key (hex), 5 its commit, 6 expire-at ms of every key,
-- 7 challenge (1/0), 8 lottery (1/0), 9 the challenge's expiry ms (its
-- single use is remembered until then; afterwards it is refused as expired)
-- Returns {result, ticket id, seq}: result 1 joined now, 0 joined before
-- (the same place; nothing changed), -1 the queue is closed, -2 the
-- challenge was used before. seq 0 is a pre-queue ticket (placed by the
-- lottery), else the FIFO sequence after the pre-queue.
local old = redis.call('HMGET', KEYS[2], 'id', 'seq')
if old[1] then
  return {0, old[1], tonumber(old[2])}
end
if redis.call('HGET', KEYS[1], 'closed') == '1' then
  return {-1, '', 0}
end
local exp = tonumber(ARGV[6])
if ARGV[7] == '1' then
  if not redis.call('SET', KEYS[4], '1', 'NX', 'PX', math.max(tonumber(ARGV[9]) - tonumber(ARGV[1]), 1000)) then
    return {-2, '', 0}
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
return {1, ARGV[3], seq}
