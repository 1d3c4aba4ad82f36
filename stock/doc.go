// Package stock is the Redis side of a flash sale: warm-up, the atomic
// deduction, releases, order states and the sold-out broadcast.
//
// Promises it keeps (DESIGN.md):
//
//   - Never oversold. Stock moves only inside Lua scripts: the deduction
//     (lua/deduct.lua), warm-up (SET NX, never raising a live sale), restock
//     (explicit, only on a live sale) and release (guarded by the order's
//     state, so at most once).
//   - The outbox entry is written by the same script as the deduction, with
//     the buyer count, the used token and the pending order: a crash can
//     not separate them.
//   - Redis may lose its memory. A missing stock key means "not warmed" and
//     closes the sale (NOT_READY); it is never read as 0 or as stock, and
//     neither release nor restock recreates it.
//
// Performance: concurrent attempts for one product are group-committed
// into one script call (see Store.Deduct), keys are built without
// allocating, and batch structures are pooled.
//
// The key layout is documented on StockKey's block in keys.go; every key
// carries the product's hash tag so that it all works on Redis Cluster.
package stock
