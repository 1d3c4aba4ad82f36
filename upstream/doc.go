// Package upstream forwards the requests the edge does not answer itself to
// origin pools.
//
// The `upstreams:` section (conf.UpstreamsConfig) names pools of servers and
// routes (host and path prefix) to them. A Manager, one per process, compiles it with Build
// into an immutable Set that the proxy keeps in its config snapshot, and
// Activate makes a Set live. What must survive a reload lives in the
// Manager, keyed by pool name and server address: health verdicts, passive
// failure counts, in-flight counters, connection pools and the health-check
// goroutines. Reloading an equal config therefore changes nothing a shopper
// could notice; a failed reload just drops its Set, since Build starts
// nothing.
//
// On the request path, Set.Match picks the pool and Pool.Serve proxies:
// round_robin or least_pending over the servers that are up (active health
// check) and not ejected (nginx-style max_fails/fail_timeout), per-pool
// timeouts, and retries on another server only for bodyless GET/HEAD/OPTIONS
// whose connection could not be made, the one case where the origin surely
// saw nothing. Both allocate nothing per request. Failures reach the client
// as generic 502/504 JSON; the detail goes to the log.
//
// The headers are nginx's with its defaults (headers.go): hop-by-hop ones
// removed both ways, names other than letters, digits and '-' dropped, the
// forwarding headers written by the edge alone unless the peer is a trusted
// proxy; TRACE, CONNECT and malformed methods are refused (Pool.Serve).
//
// A route may have a microcache (cache.go, Set.Route and Route.Serve): GET
// and HEAD answered from memory, one origin request per key at a time,
// stale answers while one renews or while the origin fails, the memory
// bounded by ristretto with TinyLFU admission. A hit allocates nothing. The
// caches outlive a reload whose route and cache settings are unchanged.
//
// Manager.Snapshot and Manager.OnResponse feed the admin listener and
// metrics; OnResponse sees the requests that went to the origin, not the
// hits.
package upstream
