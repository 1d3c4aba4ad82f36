-- The pre-queue of a sale's waiting room opened: its lottery key is drawn
-- once (the first edge's), and its commit is public from now on.
-- KEYS: 1 sk:{p}:wr
-- ARGV: 1 a new key (hex), 2 its commit, 3 expire-at ms
-- Returns the commit in force.
if redis.call('HSETNX', KEYS[1], 'key', ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], 'commit', ARGV[2])
  redis.call('PEXPIREAT', KEYS[1], tonumber(ARGV[3]))
end
return redis.call('HGET', KEYS[1], 'commit')
