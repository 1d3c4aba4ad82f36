-- Releases a lock only for its owner: a rebuild that outlived its lock's
-- TTL must not release the lock another edge took since.
--
-- KEYS[1] the lock   ARGV[1] the owner
-- Returns 1 when released, 0 when the lock is not ARGV[1]'s.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
