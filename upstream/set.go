package upstream

import (
	"bytes"
	"net/netip"
	"sort"

	"github.com/valyala/fasthttp"
)

// Set is one compiled, immutable upstream configuration: its pools and the
// routing table. It belongs in the proxy's config snapshot; a reload builds
// a new Set and the old one keeps serving requests already in flight.
type Set struct {
	pools  []*Pool
	byName map[string]*Pool
	// hosts holds the routes of each host (normalized), anyHost the host-less
	// ones; both sorted longest prefix first so the first hit is the answer.
	hosts   map[string][]route
	anyHost []route
	// caches are the routes' caches, which Activate starts.
	caches []cacheOf
}

type cacheOf struct {
	id    cacheID
	cache *Cache
}

type route struct {
	prefix []byte
	Route
}

// Route is what a request was routed to: a pool, and the route's cache if
// it has one.
type Route struct {
	pool  *Pool
	cache *Cache
}

// Pool is the route's pool.
func (r *Route) Pool() *Pool { return r.pool }

// Serve answers the request: from the route's cache when it has one and
// the request may be cached (Cache), else through the pool (Pool.Serve).
func (r *Route) Serve(ctx *fasthttp.RequestCtx, clientIP netip.Addr, proxies TrustedProxies) {
	if r.cache == nil {
		r.pool.Serve(ctx, clientIP, proxies)
		return
	}
	r.cache.serve(ctx, r.pool, clientIP, proxies)
}

// maxHostLen bounds the stack buffer Match lowercases the host into; DNS
// names are at most 253 bytes, so a longer Host cannot match a route.
const maxHostLen = 256

// Match returns the pool for a request, or nil when no route matches.
// host is the Host header (its port is ignored), path should be the
// normalized path (ctx.Path()), so "/a/../api" cannot dodge a route.
// Routes for the request's host are tried first, longest prefix first;
// host-less routes only when none of them matches. It does not allocate.
func (s *Set) Match(host, path []byte) *Pool {
	if r := s.Route(host, path); r != nil {
		return r.pool
	}
	return nil
}

// Route is Match's route: the pool with the route's cache. It does not
// allocate.
func (s *Set) Route(host, path []byte) *Route {
	if s == nil {
		return nil
	}
	if len(s.hosts) > 0 {
		var buf [maxHostLen]byte
		if key, ok := hostKey(&buf, host); ok {
			// The compiler turns a map index with string(bytes) into a
			// lookup without a conversion allocation.
			if r := longest(s.hosts[string(key)], path); r != nil {
				return r
			}
		}
	}
	return longest(s.anyHost, path)
}

func longest(routes []route, path []byte) *Route {
	for i := range routes {
		if bytes.HasPrefix(path, routes[i].prefix) {
			return &routes[i].Route
		}
	}
	return nil
}

// hostKey normalizes a Host header into buf the way conf's
// RouteConfig.HostKey does a route's host: port and IPv6 brackets stripped,
// trailing dot dropped, ASCII lower case.
func hostKey(buf *[maxHostLen]byte, host []byte) ([]byte, bool) {
	if len(host) > 0 && host[0] == '[' {
		end := bytes.IndexByte(host, ']')
		if end < 0 {
			return nil, false
		}
		host = host[1:end]
	} else if i := bytes.LastIndexByte(host, ':'); i >= 0 {
		host = host[:i]
	}
	if n := len(host); n > 0 && host[n-1] == '.' {
		host = host[:n-1]
	}
	if len(host) == 0 || len(host) > len(buf) {
		return nil, false
	}
	for i, c := range host {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return buf[:len(host)], true
}

// Pool returns the pool of that name, or nil, for callers that route by
// other means than Match (e.g. a filter that forwards to a fixed pool).
func (s *Set) Pool(name string) *Pool {
	if s == nil {
		return nil
	}
	return s.byName[name]
}

// Pools lists the pools in config order. The slice must not be modified.
func (s *Set) Pools() []*Pool {
	if s == nil {
		return nil
	}
	return s.pools
}

func sortRoutes(rs []route) {
	sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].prefix) > len(rs[j].prefix) })
}
