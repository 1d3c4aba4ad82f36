-- Sets one degrade switch unless it already holds a version at least as new,
-- so that a write-back from an edge that knew an older state never undoes a
-- newer change.
--
-- KEYS[1] sk:degrade (hash) or sk:degrade:all (string)
-- ARGV[1] product id (the hash's field), or '' for the string key
-- ARGV[2] version (unix ms)   ARGV[3] '1' on, '0' off
-- Returns 1 when set, 0 when a newer or equal version was there.
local cur
if ARGV[1] == '' then
  cur = redis.call('GET', KEYS[1])
else
  cur = redis.call('HGET', KEYS[1], ARGV[1])
end
if cur then
  local v = tonumber(string.match(cur, '^(%d+):'))
  if v and v >= tonumber(ARGV[2]) then return 0 end
end
local val = ARGV[2] .. ':' .. ARGV[3]
if ARGV[1] == '' then
  redis.call('SET', KEYS[1], val)
else
  redis.call('HSET', KEYS[1], ARGV[1], val)
end
return 1
