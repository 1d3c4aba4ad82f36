// Package stock is the Redis side of a flash sale. It warms a sale's stock,
// runs the group-committed deduction, settles orders (pay, cancel, expire),
// keeps the outbox the relay reads, broadcasts sold-out and state changes,
// and holds the copies every edge reads of the admin catalog and the degrade
// switch, the rate limits the edges share and the waiting rooms' queues.
// It owns every Redis key, channel and script: other packages call a
// Store's methods and never talk to Redis themselves. Every key name is
// built in keys.go; docs/ledger.md explains the layout, and
// docs/architecture.md the promises it serves.
//
// Anything that changes stock, a buyer's count or an order's state is one
// Lua script (lua/), so each decision and its writes are atomic. Store.Deduct
// group-commits the concurrent attempts for one product into one script
// call, and each attempt keeps its own checks, in order: enough stock
// (SOLD_OUT), token unused (BAD_TOKEN), within the limit (LIMIT_REACHED).
//
// An error from Deduct is an unknown outcome unless it wraps ErrInvalid,
// ErrNotSent or ErrClosed: the caller answers 503 and lets the outbox and the
// ledger decide (ResolveUnknown decides one such attempt and makes "not
// placed" final); a deduction is never retried blindly. Exactly one attempt of
// each failed script call also wraps ErrCallFailed, what a circuit breaker
// counts. An attempt waits in its product's queue at most
// Options.QueueTimeout and each call has a full Timeout once sent, so an
// answer comes within QueueTimeout + Timeout.
//
// A sale Redis lost (or that went back in time) is fenced and reopened from
// the order ledger with Store.Rebuild (fence.go, rebuild.go); package sale
// decides what it holds.
//
// Open with addr "" or "embedded" runs miniredis in the process, for a
// zero-setup demo (about 15x slower). Its optional DataDir snapshot survives a
// clean Close/Open exactly; after a crash the last periodic save is loaded
// without its stock and buyer keys, and the sales are rebuilt from the
// ledger as after a real Redis lost its memory.
package stock
