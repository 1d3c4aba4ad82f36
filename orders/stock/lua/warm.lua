-- Warm-up of one sale. The stock key is created with NX only: warm-up must
-- never raise (or lower) the stock of a sale that is already live, e.g. when
-- an edge restarts and warms again with the configured stock.
--
-- KEYS[1] sk:{p}:stock   KEYS[2] sk:{p}:meta
-- ARGV stock initial restocked released limit price startMs endMs fence layout ledger
-- (fence "1": record the server's run id, see deduct.lua; layout "2": the
-- buyers and used tokens of a new sale are hashes, "" per-key keys; ledger
-- "b": its orders are in bucket hashes and a deduction writes one outbox
-- entry per call, "" one key and one entry per order; see keys.go. A live
-- sale keeps its layout and ledger, whatever the edge warming it.)
-- Returns 1 when the stock key was created, 0 when it existed.
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  -- Only a sale that had no meta at all gets a layout: one whose stock key
  -- went while its meta stayed may have buyers in the per-key layout.
  local fresh = redis.call('EXISTS', KEYS[2]) == 0
  redis.call('HSET', KEYS[2], 'initial', ARGV[2], 'restocked', ARGV[3], 'released', ARGV[4],
    'limit', ARGV[5], 'price', ARGV[6], 'start', ARGV[7], 'end', ARGV[8])
  if fresh and ARGV[10] == '2' then
    redis.call('HSET', KEYS[2], 'layout', '2')
  end
  if fresh and ARGV[11] == 'b' then
    redis.call('HSET', KEYS[2], 'ledger', 'b')
  end
  if ARGV[9] == '1' then
    -- A new sale: this server is the one it starts on.
    redis.call('HSET', KEYS[2], 'runid', string.match(redis.call('INFO', 'server'), 'run_id:(%x+)'))
  end
  return 1
end
-- Live sale: the schedule may be updated, the reconciliation counters not.
redis.call('HSET', KEYS[2], 'limit', ARGV[5], 'price', ARGV[6], 'start', ARGV[7], 'end', ARGV[8])
redis.call('HSETNX', KEYS[2], 'initial', ARGV[2])
redis.call('HSETNX', KEYS[2], 'restocked', 0)
redis.call('HSETNX', KEYS[2], 'released', 0)
return 0
