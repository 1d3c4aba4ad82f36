// Package stock is the Redis side of a flash sale: warm-up, the atomic
// deduction, releases, order states, the outbox the relay reads, the
// sold-out and order-outcome broadcasts, the admin catalog and the degrade
// switch (the copies every edge reads of the durable catalogue that package
// orderstore keeps; catalog.go, degrade.go), and the rate limits every edge
// shares (the filters' policy redis; ratelimit.go), and the sales' waiting
// rooms (waitroom.go: tickets, the pre-queue, the lottery's ranks, the
// admission line, one script per call). It owns every Redis key,
// channel and script (keys.go); other packages call its methods and never
// talk to Redis themselves.
//
// Promises it keeps (docs/architecture.md):
//
//   - Never oversold. Stock moves only inside Lua scripts: the deduction
//     (lua/deduct.lua), warm-up (SET NX, never raising a live sale), restock
//     (explicit, only on a live sale) and the settle script (lua/release.lua:
//     cancel, the pay deadline and the payment, guarded by the order's
//     state, so each order is released or paid at most once, never both).
//   - Pay deadlines (settle.go). An order with PayByMs enters the due set
//     when it is stored (MarkSuccess); every edge sweeps it (ExpireDue),
//     and Redis' clock decides in the script whether a payment or the
//     deadline came first. Each settlement writes its event (release with
//     its reason, or paid) to the outbox in the same script.
//   - The outbox entry is written by the same script as the deduction, with
//     the buyer count, the used token and the pending order: a crash cannot
//     separate them.
//   - Orders in two layouts (keys.go, orderval.go): the string this version
//     writes (one SET PX, marked with one SETRANGE) and the hash older ones
//     wrote; every reader and script takes both, so edges of both versions
//     can sell one product during a rolling upgrade (Options.OrderHashes
//     keeps writing hashes while older edges, which read only those, run).
//   - Buyer counts and used tokens in two layouts (keys.go): per-product
//     hashes (16 buyer shards, a token hash per 10 s of expiry times; one call
//     per hash serves a whole batch) or one key each, the older versions'.
//     A sale's meta records its layout when it is first warmed and every
//     script follows it; Options.BuyerKeys warms new sales per-key while
//     older edges, which know only that one, serve the same Redis.
//   - A successful attempt's Outcome carries the id of its outbox entry;
//     the edge removes the entry with AckOutbox once Kafka acknowledged the
//     order event, and the outbox relay (package orders, consumer group
//     RelayGroup) re-sends whatever is left.
//   - Redis may lose its memory. A missing stock key means "not warmed" and
//     closes the sale (NOT_READY); it is never read as 0 or as stock, and
//     neither release nor restock recreates it. Warm-up reopens a lost sale
//     from the order ledger with Store.Rebuild (package sale computes it):
//     order states, then every buyer's count, then the stock key, each step
//     a script guarded by the missing stock key, so no purchase ever sees
//     the stock without the counts. A count is set to exactly what the
//     ledger and the outbox say, lowered as well as raised: a snapshot
//     holds the units of orders released after it (lua/set_buyers.lua). The unpaid orders' deadlines go back
//     into the due set with their hashes (lua/fix_orders.lua), overdue ones
//     too: the first sweep after the reopening releases them. Every hash
//     that survived of an order the ledger knows as settled (paid,
//     cancelled, expired; read page by page, Rebuild.Settled) takes its
//     final state, so that a snapshot's "success" is never settled twice.
//     A Redis back from an old snapshot has its stock lowered to the
//     ledger's, or raised by no more than what was released or restocked
//     since (lua/reopen.lua).
//
// What a loss costs. After a loss the sale holds initial + restocked minus
// the units the ledger says shoppers hold: stored orders (status 0 unpaid
// and 1 paid; cancelled and expired ones are status 2 and already back), events Kafka acknowledged but the
// consumer had not stored yet (warm-up waits for the drain), and outbox
// entries that survived (the embedded server's snapshot; the ledger is
// asked which of them are stored). One kind of order is not counted: one
// the script deducted whose event never reached Kafka and whose outbox
// entry died with Redis (the edge died, or Kafka failed and the shopper got
// 503 with the order id before the relay could re-send it). Its shopper was
// never told "queued" (promise 2), its units go back on sale and
// its buyer count is not restored; the order does not exist. An event still
// being retried into Kafka when Redis went away is the reason warm-up
// waits out orderstore.Ledger.InFlight before it drains.
//
// Surviving a real Redis restart needs nothing here: no persistence is
// assumed. Restocks recorded only in a lost meta are forgotten (the
// configured stock is the initial again), except what the ledger proves:
// warm-up records at least held - initial as restocked.
//
// Store.Deduct group-commits the concurrent attempts for one product into
// one script call; each attempt keeps its own checks, in order: enough stock
// for the quantity (SOLD_OUT), token not used yet (BAD_TOKEN), bought + qty
// within the limit (LIMIT_REACHED). An error from Deduct is an unknown
// outcome unless it wraps ErrInvalid, ErrNotSent or ErrClosed: answer 503 and
// let the outbox and the ledger settle it (SettleUnknown decides one such
// attempt, and makes "not placed" final); never retry a deduction blindly.
// Exactly one attempt of each failed script call also wraps ErrCallFailed:
// what a circuit breaker counts. An attempt waits in its product's queue at
// most Options.QueueTimeout (redis.queue_timeout, 1s by default), and each
// call has a full Timeout from when it is sent, so an answer comes within
// QueueTimeout + Timeout.
//
// Key layout (keys.go): every key carries the product's hash tag {p}, so each
// script touches one slot and everything runs unchanged on Redis Cluster.
//
// The embedded server (Open with addr "" or "embedded") is miniredis, for a
// zero-setup demo only: ~15x slower. Its optional DataDir snapshot keeps
// strings, hashes, sorted sets and stream entries (not stream consumer groups): exactly
// across a clean Close/Open; after a crash the last periodic save (every
// Options.SaveEvery) is loaded without its stock and buyer keys, and the
// sales go through the same ledger rebuild as after a real Redis lost its
// memory (see Open).
package stock
