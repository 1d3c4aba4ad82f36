-- Closes a sale for a ledger rebuild on every edge: the deduction script
-- sells nothing while the meta has a 'recovering' field (deduct.lua sets it
-- itself when the server's run id changed; this script is for a stock key
-- found missing). The first fence wins: a later caller gets the one in force,
-- so every edge waits for, and reports quiet on, the same fence.
--
-- KEYS[1] sk:{p}:meta   ARGV[1] the fence id to set ("<ms>:<node>:<reason>")
-- Returns the fence in force.
redis.call('HSETNX', KEYS[1], 'recovering', ARGV[1])
return redis.call('HGET', KEYS[1], 'recovering')
