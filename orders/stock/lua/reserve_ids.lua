-- Reserves the times a node's order ids may carry (stock.Store.ReserveIDs):
-- the field <node>:ids of sk:edges is the latest time, unix ms on the node's
-- own clock, an id of its running process may carry. A new process starts
-- its ids after it, so that an edge restarted with its clock behind never
-- issues an id its previous process did (nemesis seed 557).
-- KEYS[1] sk:edges
-- ARGV[1] the node's number
-- ARGV[2] the time the node's next id carries at least (unix ms)
-- ARGV[3] the span reserved past it, ms
-- ARGV[4] "first": a process's first call; "renew"; "exit": the process
--         issues no more ids, and the reservation shrinks to ARGV[2]
-- ARGV[5] for "first", when no reservation was ever written (an edge of an
--         earlier version ran this node): how long after its last
--         heartbeat it may have issued ids, ms
-- Returns {the reservation before, the reservation now}.
local n = ARGV[1]
local v = redis.call('HMGET', KEYS[1], n .. ':ids', n, n .. ':stop')
local old = tonumber(v[1] or '')
local tick = tonumber(ARGV[2])
local mode = ARGV[4]
if mode == 'first' then
  if not old then
    old = math.max(tonumber(v[2] or '0') + tonumber(ARGV[5]), tonumber(v[3] or '0'))
  end
  -- The process's ids start after what its predecessor may have issued.
  tick = math.max(tick, old + 1)
end
old = old or 0
local new
if mode == 'exit' then
  new = math.max(tick, tonumber(v[3] or '0'))
else
  new = math.max(old, tick + tonumber(ARGV[3]))
end
redis.call('HSET', KEYS[1], n .. ':ids', new)
return {old, new}
