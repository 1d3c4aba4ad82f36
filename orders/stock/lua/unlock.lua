-- Releases a lock, or renews its lease, only for its owner: a rebuild that
-- outlived its lock's lease must not release or extend the lock another
-- edge took since.
--
-- KEYS[1] the lock   ARGV[1] the owner   ARGV[2] (optional) the new lease,
-- ms from now: renew instead of release
-- Returns 1 when released (renewed), 0 when the lock is not ARGV[1]'s.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return redis.call('DEL', KEYS[1])
