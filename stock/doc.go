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
//     the buyer count, the used token and the pending order: a crash cannot
//     separate them.
//   - A successful attempt's Outcome carries the id of its outbox entry;
//     the edge removes the entry with AckOutbox once Kafka acknowledged the
//     order event, and the outbox relay (package orders, consumer group
//     RelayGroup) re-sends whatever is left.
//   - Redis may lose its memory. A missing stock key means "not warmed" and
//     closes the sale (NOT_READY); it is never read as 0 or as stock, and
//     neither release nor restock recreates it.
//
// Store.Deduct group-commits the concurrent attempts for one product into
// one script call; each attempt keeps its own checks, in order: enough stock
// for the quantity (SOLD_OUT), token not used yet (BAD_TOKEN), bought + qty
// within the limit (LIMIT_REACHED). An error from Deduct is an unknown
// outcome unless it wraps ErrInvalid, ErrNotSent or ErrClosed: answer 503 and
// let the outbox and the ledger settle it; never retry a deduction blindly.
//
// Key layout (keys.go): every key carries the product's hash tag {p}, so each
// script touches one slot and everything runs unchanged on Redis Cluster.
//
// The embedded server (Open with addr "" or "embedded") is miniredis, for a
// zero-setup demo only: ~15x slower, and its optional DataDir snapshot keeps
// strings, hashes and stream entries (not stream consumer groups) across a
// clean Close/Open, not across a crash.
package stock
