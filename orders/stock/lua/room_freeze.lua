-- The opening of a sale's waiting room: the pre-queue is closed and counted,
-- the lottery's key kept (drawn now if nobody joined before), and the
-- admission line starts at the sale's start. Idempotent: every edge may
-- call it; the first call decides.
-- KEYS: 1 sk:{p}:wr, 2 sk:{p}:wr:pre
-- ARGV: 1 a new key (hex), 2 its commit, 3 the sale's start ms, 4 the
-- configured rate per minute, 5 expire-at ms
-- Returns {members, key, ranked (1/0)}.
if redis.call('HGET', KEYS[1], 'frozen') ~= '1' then
  if redis.call('HSETNX', KEYS[1], 'key', ARGV[1]) == 1 then
    redis.call('HSET', KEYS[1], 'commit', ARGV[2])
  end
  local members = redis.call('SCARD', KEYS[2])
  redis.call('HSET', KEYS[1], 'frozen', '1', 'members', members)
  if members == 0 then
    redis.call('HSET', KEYS[1], 'ranked', '1')
  end
  redis.call('HSETNX', KEYS[1], 'base', '0')
  redis.call('HSETNX', KEYS[1], 'basems', ARGV[3])
  redis.call('HSETNX', KEYS[1], 'rate', ARGV[4])
  redis.call('PEXPIREAT', KEYS[1], tonumber(ARGV[5]))
end
local st = redis.call('HMGET', KEYS[1], 'members', 'key', 'ranked')
return {tonumber(st[1]), st[2], st[3] == '1' and 1 or 0}
