-- Schedule update of a live sale (warm-up of a sale that is already open):
-- limit, price, start and end. It never creates the stock key: a sale whose
-- key is missing is not open, and only warm-up or the ledger rebuild may
-- open it.
--
-- KEYS[1] sk:{p}:stock   KEYS[2] sk:{p}:meta
-- ARGV stock initial restocked released limit price startMs endMs (as warm.lua)
-- Returns 1 when the sale is live (meta updated), 0 when its stock key is missing.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], 'limit', ARGV[5], 'price', ARGV[6], 'start', ARGV[7], 'end', ARGV[8])
redis.call('HSETNX', KEYS[2], 'initial', ARGV[2])
redis.call('HSETNX', KEYS[2], 'restocked', 0)
redis.call('HSETNX', KEYS[2], 'released', 0)
return 1
