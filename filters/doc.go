// Package filters is the sale API's first line of defence: the checks an edge
// makes on every request before it spends anything on it, cheapest first.
//
// A config's filters list is compiled by Build into a Chain: each entry's
// type is looked up in a registry of constructors (Register, one file per
// filter type), each constructor decodes and validates its own params, and
// the result is an immutable slice that Run walks in a flat loop. The proxy
// swaps whole chains on reload; state that must outlive a reload (limiter
// buckets, connection counts, counters) lives in Zones, keyed by name.
//
// Filter types here:
//
//   - access: nginx allow/deny rules on the client address.
//   - ip_limit: nginx limit_req keyed by the client address, per edge or,
//     with policy redis, shared by every edge (redislimit.go) (Limiter, which
//     other keyed limits reuse through LimitConfig and KeyFromBytes).
//   - conn_limit: nginx limit_conn, requests in flight per client address.
//
// The sale filters (session, sale_window, sold_out, user_limit,
// purchase_token) enforce the purchase rules of package sale/api, each by
// calling its rule's Check, which records a passed rule on the Call: the
// sale handler decides only the rules the chain did not.
//
// RealIP resolves the client address behind trusted proxies (nginx realip,
// recursive) before the chain runs.
//
// What a filter reads and answers is the shopper API's contract, package
// sale/api: a Request is an api.Call plus the chain's bookkeeping, and a
// rejection is an entry of its catalogue, so the sale behind the chain
// shares both without importing the edge.
//
// Everything on the request path is allocation-free (the tests prove it with
// testing.AllocsPerRun) and reads time only from Request.NowNano, which the
// proxy fills from an injectable clock, so tests never sleep.
package filters
