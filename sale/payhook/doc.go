// Package payhook checks a payment provider's call of the edge's webhook,
// POST /api/payments/webhook: its HMAC-SHA256 signature over the timestamp
// and the raw body (Flashgate-Signature: v1=<hex>), the timestamp against
// the tolerance, and the event it carries. What the event does (the order
// paid, its replay id recorded in the same script) is the edge's: proxy.
//
// The signature is checked before anything in the body is believed, and in
// constant time; the body is never logged. A replayed call (the same event
// id) is refused by Redis, which remembers each id for twice the
// tolerance: older calls fail the timestamp check anyway.
package payhook
