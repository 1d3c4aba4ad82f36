// Package report tells one sale's story after the sale: `proxy report`
// and the admin listener's GET /admin/report build a Report from the order
// store (every order, its payment or expiry), the sale's timeline in Redis
// (one record per edge per second in which something moved: answers to
// `do` by code, latency buckets, the room's line, the fence, degrade and
// breaker flags — Second, written by the edge's chart sampler), the
// waiting room's lottery (its commitment, key and ranking, re-checked),
// and reconcile's verdict; WriteHTML draws it as one self-contained page.
//
// Aggregate, which sums the edges' records by second, also serves the
// dashboard's all-edges charts.
package report
