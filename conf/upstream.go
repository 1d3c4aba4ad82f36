package conf

import (
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"flashgate/conf/field"
)

// UpstreamsConfig is the `upstreams:` section: named origin pools and the routes that
// map requests to them.
type UpstreamsConfig struct {
	Pools  []PoolConfig  `yaml:"pools"`
	Routes []RouteConfig `yaml:"routes"`
	// UnderscoresInHeaders passes request headers whose names contain '_'
	// (nginx underscores_in_headers); off, they are dropped. Either way a
	// name that spells a header the edge writes or removes (X_Real_IP) is
	// dropped.
	UnderscoresInHeaders bool `yaml:"underscores_in_headers"`
}

// PoolConfig is one named origin pool.
type PoolConfig struct {
	Name    string   `yaml:"name"`
	Balance string   `yaml:"balance"` // round_robin | least_pending
	Servers []string `yaml:"servers"` // host:port, plain HTTP/1.1
	// ConnectTimeout bounds the TCP connect to a server.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// ReadTimeout bounds reading the whole response (headers and body) once
	// the request is written; WriteTimeout bounds writing the request. Unlike
	// nginx's proxy_read_timeout it is not reset between reads. Either may
	// fire up to 1/16 of itself (at most 100 ms) late, never early: the
	// edge moves an origin connection's deadlines forward in steps rather
	// than on every request.
	ReadTimeout  time.Duration `yaml:"read_timeout"`
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxConns caps the connections to each server; a request finding all of
	// them busy waits up to ConnectTimeout for one.
	MaxConns int `yaml:"max_conns"`
	// MaxRetries is how many other servers a request may be retried on. Only
	// bodyless GET/HEAD/OPTIONS are retried, and only when the connection
	// could not be made, so the origin never sees a request twice. A pointer
	// so that an explicit 0 (no retries) differs from "not set" (default 1).
	MaxRetries *int          `yaml:"max_retries"`
	Health     HealthConfig  `yaml:"health"`
	Passive    PassiveConfig `yaml:"passive"`
}

// HealthConfig is an active health check: GET Path on every server each
// Interval. Without Path there is no active check and servers count as up.
type HealthConfig struct {
	Path     string        `yaml:"path"`
	Interval time.Duration `yaml:"interval"`
	Timeout  time.Duration `yaml:"timeout"`
	Rise     int           `yaml:"rise"` // consecutive successes to mark a server up
	Fall     int           `yaml:"fall"` // consecutive failures to mark it down
}

// PassiveConfig ejects a server after MaxFails failures within FailTimeout,
// for FailTimeout (nginx max_fails/fail_timeout). MaxFails 0 disables it; a
// pool of one server is never ejected (as in nginx: there is nowhere else to go).
type PassiveConfig struct {
	MaxFails    *int          `yaml:"max_fails"`
	FailTimeout time.Duration `yaml:"fail_timeout"`
}

// RouteConfig maps a path prefix (and optionally a host) to a pool.
type RouteConfig struct {
	// Prefix is a plain byte prefix of the path ("/api" also matches
	// "/apiary"; write "/api/" to avoid that). Empty means "/".
	Prefix string `yaml:"prefix"`
	// Host is matched exactly (case-insensitive, without port) against the
	// request's Host. Empty matches any host; a route for the request's
	// host always wins over host-less routes, like an nginx server block.
	Host string `yaml:"host"`
	Pool string `yaml:"pool"`
	// Cache, when set, answers the route's GET and HEAD requests from a
	// microcache in front of the pool (upstream/cache.go says what is
	// stored and for how long).
	Cache *CacheConfig `yaml:"cache"`
	// WaitingRoom, when set, queues the route's visitors in front of its
	// pool (conf/routeroom.go, package proxy/routeroom).
	WaitingRoom *RouteRoomConfig `yaml:"waiting_room"`
}

// CacheConfig is a route's microcache: nginx proxy_cache with
// proxy_cache_lock and proxy_cache_use_stale updating error timeout, Varnish's
// grace. Only TTL is required.
type CacheConfig struct {
	// TTL is how long an answer stays fresh. An origin's s-maxage, max-age
	// or Expires, and the Age it sends, may shorten it, never lengthen it.
	TTL time.Duration `yaml:"ttl"`
	// StaleWhileRevalidate: for this long after TTL a request is answered
	// from the stale copy while one background request refreshes it.
	StaleWhileRevalidate time.Duration `yaml:"stale_while_revalidate"`
	// StaleIfError: for this long after TTL an origin failure (5xx, timeout,
	// connection refused) is answered from the stale copy instead.
	StaleIfError time.Duration `yaml:"stale_if_error"`
	// MaxBytes bounds the memory of the route's stored answers (bodies,
	// headers and keys); admission decides which answers earn a place.
	MaxBytes int64 `yaml:"max_bytes"`
	// Key lists the request parts an answer is stored under: method, host,
	// path, query, header:NAME, cookie:NAME.
	Key []string `yaml:"key"`
	// LockTimeout bounds how long a request waits for the one request to
	// the origin for its key (proxy_cache_lock_timeout); then it is
	// answered stale if it can be, else it goes to the origin itself.
	LockTimeout time.Duration `yaml:"lock_timeout"`
	// WithAuthorization caches requests that carry Authorization too;
	// off, they bypass the cache (their answer may be the user's own). On,
	// the key must name the header (header:Authorization), so that each
	// credential has its own answers, or Public must say that the route's
	// answers are the same for every user: else one user's page would be
	// served to the next (Validate refuses it).
	WithAuthorization bool `yaml:"with_authorization"`
	// Public says, on purpose, that the route's answers are the same for
	// everyone, whoever the Authorization header names: with
	// with_authorization and a key without header:Authorization, one
	// stored answer serves every user. Off by default.
	Public bool `yaml:"public"`
	// XCache adds X-Cache: HIT, MISS, STALE, UPDATING or BYPASS to the
	// answers. A pointer so that an explicit false differs from "not set"
	// (default true).
	XCache *bool `yaml:"x_cache"`
}

// Cache key parts (CacheConfig.Key); header: and cookie: take a name.
const (
	KeyMethod       = "method"
	KeyHost         = "host"
	KeyPath         = "path"
	KeyQuery        = "query"
	KeyHeaderPrefix = "header:"
	KeyCookiePrefix = "cookie:"
)

// MaxCacheKeyParts bounds cache.key, which keeps the key's parts in a fixed
// array at serve time.
const MaxCacheKeyParts = 16

// MinCacheBytes is the smallest cache.max_bytes: below it admission has
// nothing to choose between.
const MinCacheBytes = 64 << 10

// Balancing algorithms (PoolConfig.Balance).
const (
	RoundRobin   = "round_robin"
	LeastPending = "least_pending"
)

// MaxRetriesLimit bounds max_retries, which keeps the per-request list of
// tried servers on the stack.
const MaxRetriesLimit = 16

// fill gives the pools' and routes' settings left out their defaults;
// pools and routes are list items, so only a pass after decoding can.
func (c *UpstreamsConfig) fill() {
	for i := range c.Pools {
		p := &c.Pools[i]
		orDefault(&p.Balance, RoundRobin)
		orDefault(&p.ConnectTimeout, time.Second)
		orDefault(&p.ReadTimeout, 10*time.Second)
		orDefault(&p.WriteTimeout, 10*time.Second)
		orDefault(&p.MaxConns, 512)
		if p.MaxRetries == nil {
			p.MaxRetries = intPtr(1)
		}
		if p.Health.Path != "" {
			orDefault(&p.Health.Interval, 2*time.Second)
			orDefault(&p.Health.Timeout, time.Second)
			orDefault(&p.Health.Rise, 2)
			orDefault(&p.Health.Fall, 3)
		}
		if p.Passive.MaxFails == nil {
			p.Passive.MaxFails = intPtr(3)
		}
		orDefault(&p.Passive.FailTimeout, 10*time.Second)
	}
	for i := range c.Routes {
		orDefault(&c.Routes[i].Prefix, "/")
		if w := c.Routes[i].WaitingRoom; w != nil {
			w.fill()
		}
		if cc := c.Routes[i].Cache; cc != nil {
			orDefault(&cc.MaxBytes, 64<<20)
			orDefault(&cc.LockTimeout, 5*time.Second)
			if len(cc.Key) == 0 {
				cc.Key = []string{KeyMethod, KeyHost, KeyPath, KeyQuery}
			}
			if cc.XCache == nil {
				cc.XCache = boolPtr(true)
			}
		}
	}
}

// WithDefaults returns c with the defaults Parse gives pools and routes,
// leaving c's own lists alone: for sections built in code, as tests do.
func (c UpstreamsConfig) WithDefaults() UpstreamsConfig {
	c.Pools = slices.Clone(c.Pools)
	c.Routes = slices.Clone(c.Routes)
	for i := range c.Routes {
		if cc := c.Routes[i].Cache; cc != nil {
			cp := *cc
			cp.Key = slices.Clone(cc.Key)
			c.Routes[i].Cache = &cp
		}
		if w := c.Routes[i].WaitingRoom; w != nil {
			cp := *w
			c.Routes[i].WaitingRoom = &cp
		}
	}
	c.fill()
	return c
}

func intPtr(n int) *int { return &n }

func boolPtr(b bool) *bool { return &b }

// Validate reports every problem with paths relative to the section, e.g.
// "pools[0].servers[1]". Settings left at zero are errors: Parse (or
// WithDefaults) fills them first.
func (c *UpstreamsConfig) Validate() field.Errors {
	var errs field.Errors
	names := make(map[string]int, len(c.Pools))
	for i := range c.Pools {
		p := &c.Pools[i]
		at := field.Index("pools", i)
		switch {
		case p.Name == "":
			errs.Add(field.Join(at, "name"), "required")
		default:
			if j, dup := names[p.Name]; dup {
				errs.Add(field.Join(at, "name"), "duplicate pool name %q (also pools[%d])", p.Name, j)
			} else {
				names[p.Name] = i
			}
		}
		switch p.Balance {
		case RoundRobin, LeastPending:
		default:
			errs.Add(field.Join(at, "balance"), "unknown balance %q (want %s or %s)", p.Balance, RoundRobin, LeastPending)
		}
		if len(p.Servers) == 0 {
			errs.Add(field.Join(at, "servers"), "at least one server is required")
		}
		seen := make(map[string]int, len(p.Servers))
		for j, s := range p.Servers {
			sat := field.Join(at, field.Index("servers", j))
			if msg := checkHostPort(s); msg != "" {
				errs.Add(sat, "%s", msg)
				continue
			}
			if k, dup := seen[s]; dup {
				errs.Add(sat, "duplicate server %q (also servers[%d])", s, k)
			}
			seen[s] = j
		}
		mustBePositive(&errs, field.Join(at, "connect_timeout"), p.ConnectTimeout)
		mustBePositive(&errs, field.Join(at, "read_timeout"), p.ReadTimeout)
		mustBePositive(&errs, field.Join(at, "write_timeout"), p.WriteTimeout)
		if p.MaxConns <= 0 {
			errs.Add(field.Join(at, "max_conns"), "must be positive")
		}
		if r := p.MaxRetries; r == nil || *r < 0 || *r > MaxRetriesLimit {
			errs.Add(field.Join(at, "max_retries"), "must be between 0 and %d", MaxRetriesLimit)
		}
		if h := p.Health; h.Path != "" {
			hat := field.Join(at, "health")
			if !strings.HasPrefix(h.Path, "/") {
				errs.Add(field.Join(hat, "path"), "must start with \"/\"")
			}
			mustBePositive(&errs, field.Join(hat, "interval"), h.Interval)
			mustBePositive(&errs, field.Join(hat, "timeout"), h.Timeout)
			if h.Rise <= 0 {
				errs.Add(field.Join(hat, "rise"), "must be positive")
			}
			if h.Fall <= 0 {
				errs.Add(field.Join(hat, "fall"), "must be positive")
			}
		}
		if f := p.Passive.MaxFails; f == nil || *f < 0 {
			errs.Add(field.Join(at, "passive.max_fails"), "must not be negative (0 disables passive ejection)")
		}
		mustBePositive(&errs, field.Join(at, "passive.fail_timeout"), p.Passive.FailTimeout)
	}

	type routeKey struct{ host, prefix string }
	routes := make(map[routeKey]int, len(c.Routes))
	for i, r := range c.Routes {
		at := field.Index("routes", i)
		if !strings.HasPrefix(r.Prefix, "/") {
			errs.Add(field.Join(at, "prefix"), "must start with \"/\"")
		}
		host, msg := normalizeHost(r.Host)
		if msg != "" {
			errs.Add(field.Join(at, "host"), "%s", msg)
		}
		switch {
		case r.Pool == "":
			errs.Add(field.Join(at, "pool"), "required")
		default:
			if _, ok := names[r.Pool]; !ok {
				errs.Add(field.Join(at, "pool"), "unknown pool %q", r.Pool)
			}
		}
		if r.Cache != nil {
			validateCache(&errs, field.Join(at, "cache"), r.Cache)
		}
		if r.WaitingRoom != nil {
			r.WaitingRoom.validate(&errs, field.Join(at, "waiting_room"))
		}
		k := routeKey{host, r.Prefix}
		if j, dup := routes[k]; dup {
			errs.Add(at, "duplicate route (same host and prefix as routes[%d])", j)
		} else {
			routes[k] = i
		}
	}
	return errs
}

func validateCache(errs *field.Errors, at string, c *CacheConfig) {
	mustBePositive(errs, field.Join(at, "ttl"), c.TTL)
	if c.StaleWhileRevalidate < 0 {
		errs.Add(field.Join(at, "stale_while_revalidate"), "must not be negative")
	}
	if c.StaleIfError < 0 {
		errs.Add(field.Join(at, "stale_if_error"), "must not be negative")
	}
	if c.MaxBytes < MinCacheBytes {
		errs.Add(field.Join(at, "max_bytes"), "must be at least %d", MinCacheBytes)
	}
	mustBePositive(errs, field.Join(at, "lock_timeout"), c.LockTimeout)
	if len(c.Key) == 0 || len(c.Key) > MaxCacheKeyParts {
		errs.Add(field.Join(at, "key"), "want 1 to %d parts", MaxCacheKeyParts)
	}
	seen := make(map[string]int, len(c.Key))
	for i, part := range c.Key {
		pat := field.Join(at, field.Index("key", i))
		if msg := checkKeyPart(part); msg != "" {
			errs.Add(pat, "%s", msg)
			continue
		}
		norm := strings.ToLower(part)
		if j, dup := seen[norm]; dup {
			errs.Add(pat, "duplicate part %q (also key[%d])", part, j)
		}
		seen[norm] = i
	}
	if c.XCache == nil {
		errs.Add(field.Join(at, "x_cache"), "required (Parse fills it)")
	}
	if c.WithAuthorization && !c.Public && !c.keyNames(KeyHeaderPrefix+"authorization") {
		errs.Add(field.Join(at, "with_authorization"), "serves one user's answer to another: add %q to key, or say public: true if the route's answers are the same for every user",
			KeyHeaderPrefix+"Authorization")
	}
}

// keyNames reports whether the key has part (any case).
func (c *CacheConfig) keyNames(part string) bool {
	for _, p := range c.Key {
		if strings.EqualFold(p, part) {
			return true
		}
	}
	return false
}

// checkKeyPart returns why part is not a cache key part, or "".
func checkKeyPart(part string) string {
	switch part {
	case KeyMethod, KeyHost, KeyPath, KeyQuery:
		return ""
	}
	name, ok := strings.CutPrefix(part, KeyHeaderPrefix)
	if !ok {
		name, ok = strings.CutPrefix(part, KeyCookiePrefix)
	}
	if !ok {
		return "unknown part " + strconv.Quote(part) + " (want method, host, path, query, header:NAME or cookie:NAME)"
	}
	if name == "" {
		return "a name is required after \":\""
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return "name " + strconv.Quote(name) + " may hold only letters, digits, '-' and '_'"
		}
	}
	return ""
}

func mustBePositive(errs *field.Errors, path string, d time.Duration) {
	if d <= 0 {
		errs.Add(path, "must be positive")
	}
}

// checkHostPort returns why s is not a usable host:port, or "".
func checkHostPort(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "want host:port, e.g. 10.0.0.5:8080"
	}
	if host == "" {
		return "host is empty"
	}
	if strings.ContainsAny(host, "/ ") {
		return "host " + strconv.Quote(host) + " is not a hostname or IP"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "port " + strconv.Quote(port) + " is not 1-65535"
	}
	return ""
}

// HostKey is the route's host as requests are matched against it (see
// normalizeHost); "" matches any host. Validate rejects hosts it cannot
// normalize.
func (r RouteConfig) HostKey() string {
	h, _ := normalizeHost(r.Host)
	return h
}

// normalizeHost turns a route's host into the form Match compares with:
// lower case, no brackets around IPv6, no trailing dot. It returns why the
// host is unusable, or "".
func normalizeHost(h string) (string, string) {
	if h == "" {
		return "", ""
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		ip, err := netip.ParseAddr(h[1 : len(h)-1])
		if err != nil || !ip.Is6() {
			return "", "not a valid IPv6 literal"
		}
		return h[1 : len(h)-1], ""
	}
	if strings.Contains(h, ":") {
		return "", "must not include a port (the request's port is ignored)"
	}
	if h == "" || strings.ContainsAny(h, "/ *?#@") {
		return "", "must be a plain hostname"
	}
	return h, ""
}
