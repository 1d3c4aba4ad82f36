package upstream

import (
	"flashgate/conf"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Manager owns what must outlive a config reload: each server's health and
// passive-failure state, its connection pool, and the active health-check
// goroutines. There is one per process. Build and Activate are called by
// one reloader at a time; Serve, Match and Snapshot from any goroutine.
type Manager struct {
	// OnResponse, when set (before the first Serve), is called after every
	// proxied request with the pool name, the status sent to the client
	// (502/504 when the origin failed) and the time spent waiting for the
	// origin: from the request being ready to send to the last attempt's
	// answer or failure, retries included (not the caller's filters nor the
	// edge's header rewriting). It runs on the request goroutine: keep it
	// cheap and allocation-free.
	OnResponse func(pool string, status int, d time.Duration)

	log *slog.Logger
	// now is the clock of passive ejection, swapped in tests.
	now func() time.Time
	// cacheNow is the caches' freshness clock (unix ns), swapped in tests.
	cacheNow func() int64

	mu       sync.Mutex
	states   map[serverKey]*serverState // servers of the active set
	servers  map[serverKey]*server      // the active set's servers, for reuse of their clients
	checkers map[serverKey]*checker
	// caches are the active set's route caches: a reload with the same
	// route and cache config keeps the stored answers.
	caches map[cacheID]*Cache
	active *Set
	closed bool
	wg     sync.WaitGroup // health-check goroutines, and the closers of retired caches
}

// cacheID names a route's cache across reloads.
type cacheID struct{ host, prefix, pool string }

// serverKey names a server across reloads: the same address in two pools
// is two servers, each with its own health and limits.
type serverKey struct{ pool, addr string }

// serverState is the part of a server that survives reloads.
type serverState struct {
	pool, addr string
	// up is the verdict of the active check; true when there is none.
	up      atomic.Bool
	pending atomic.Int64
	// fails counts passive failures in the window opened at windowStart.
	fails atomic.Int32
	// ejectedUntil is when a passive ejection ends (unix ns). It stays set
	// after the ejection expired until a request succeeds, so the first
	// failure after the pause ejects again at once (half-open).
	ejectedUntil atomic.Int64
	mu           sync.Mutex // serializes passive bookkeeping (failure path only)
	windowStart  int64
}

func newServerState(k serverKey) *serverState {
	st := &serverState{pool: k.pool, addr: k.addr}
	// A new server is trusted until checks say otherwise: starting down
	// would answer 502 for the first rise*interval after every start.
	st.up.Store(true)
	return st
}

// ServerState is one server as seen by admin and metrics.
type ServerState struct {
	Pool string
	Addr string
	// Healthy: the balancer would pick it now (Up and not Ejected).
	Healthy bool
	Up      bool // active health check verdict (true without a check)
	Ejected bool // passively ejected (max_fails within fail_timeout)
	Pending int64
	Fails   int // passive failures in the current window
}

// NewManager returns an empty manager; nil logger means slog.Default().
func NewManager(logger *slog.Logger) *Manager {
	if logger == nil {
		logger = slog.Default()
	}
	return &Manager{
		log:      logger,
		now:      time.Now,
		cacheNow: func() int64 { return time.Now().UnixNano() },
		states:   map[serverKey]*serverState{},
		servers:  map[serverKey]*server{},
		checkers: map[serverKey]*checker{},
		caches:   map[cacheID]*Cache{},
	}
}

// Build compiles c (as conf loaded it, with its defaults; validated again)
// into a Set. It only reads the manager: state of servers already active is
// shared with the new Set, connection pools are reused when their settings
// are unchanged. Nothing starts, so a Set from a failed reload can simply be
// dropped.
func (m *Manager) Build(c conf.UpstreamsConfig) (*Set, error) {
	if errs := c.Validate(); len(errs) > 0 {
		return nil, errs
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	s := &Set{byName: make(map[string]*Pool, len(c.Pools)), hosts: map[string][]route{}}
	for i := range c.Pools {
		pc := &c.Pools[i]
		p := &Pool{
			name:         pc.Name,
			m:            m,
			leastPending: pc.Balance == conf.LeastPending,
			maxRetries:   *pc.MaxRetries,
			maxFails:     *pc.Passive.MaxFails,
			failTimeout:  pc.Passive.FailTimeout,
			health:       pc.Health,
			connect:      pc.ConnectTimeout,
			underscores:  c.UnderscoresInHeaders,
		}
		if len(pc.Servers) == 1 {
			p.maxFails = 0
		}
		cs := clientSettings{pc.ConnectTimeout, pc.ReadTimeout, pc.WriteTimeout, pc.MaxConns}
		for _, addr := range pc.Servers {
			k := serverKey{pc.Name, addr}
			srv := &server{addr: addr, cs: cs}
			if old := m.servers[k]; old != nil && old.cs == cs {
				srv.hc = old.hc
			} else {
				srv.hc = newHostClient(addr, cs)
			}
			if st := m.states[k]; st != nil {
				srv.st = st
			} else {
				srv.st = newServerState(k)
			}
			p.servers = append(p.servers, srv)
		}
		s.pools = append(s.pools, p)
		s.byName[p.name] = p
	}
	for _, rc := range c.Routes {
		host := rc.HostKey()
		r := route{prefix: []byte(rc.Prefix), Route: Route{pool: s.byName[rc.Pool]}}
		if rc.Cache != nil {
			id := cacheID{host, rc.Prefix, rc.Pool}
			if old := m.caches[id]; old != nil && old.sameConfig(*rc.Cache) {
				r.cache = old
			} else {
				r.cache = newCache(*rc.Cache)
				r.cache.now = m.cacheNow
			}
			s.caches = append(s.caches, cacheOf{id, r.cache})
		}
		if host == "" {
			s.anyHost = append(s.anyHost, r)
		} else {
			s.hosts[host] = append(s.hosts[host], r)
		}
	}
	sortRoutes(s.anyHost)
	for _, rs := range s.hosts {
		sortRoutes(rs)
	}
	return s, nil
}

// Activate makes s the live set: health checks start for its servers that
// have none (or whose check settings changed), stop for servers s no longer
// has, and keep running, with their state, for the rest. Idle connections
// of replaced connection pools are closed; requests in flight finish.
func (m *Manager) Activate(s *Set) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || s == nil {
		return
	}
	states := make(map[serverKey]*serverState, len(m.states))
	servers := make(map[serverKey]*server, len(m.servers))
	for _, p := range s.pools {
		for _, srv := range p.servers {
			k := serverKey{p.name, srv.addr}
			states[k], servers[k] = srv.st, srv
			ck := m.checkers[k]
			if ck != nil && (p.health.Path == "" || ck.cfg != p.health || ck.connect != p.connect || ck.st != srv.st) {
				ck.halt()
				delete(m.checkers, k)
				ck = nil
			}
			switch {
			case p.health.Path == "":
				// No check vouches for it any more: a verdict of an old
				// check must not keep it out forever.
				srv.st.up.Store(true)
			case ck == nil:
				m.checkers[k] = m.startChecker(srv, p.health, p.connect)
			}
		}
	}
	for k, ck := range m.checkers {
		if _, ok := states[k]; !ok {
			ck.halt()
			delete(m.checkers, k)
		}
	}
	for k, old := range m.servers {
		if now := servers[k]; now == nil || now.hc != old.hc {
			old.hc.CloseIdleConnections()
		}
	}
	caches := make(map[cacheID]*Cache, len(s.caches))
	for _, rc := range s.caches {
		rc.cache.start()
		caches[rc.id] = rc.cache
	}
	for id, old := range m.caches {
		if caches[id] != old {
			old.retire(&m.wg)
		}
	}
	m.states, m.servers, m.caches, m.active = states, servers, caches, s
}

// Close stops every health check and waits for them, then closes idle
// origin connections. Sets keep working for requests still in flight.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	for k, ck := range m.checkers {
		ck.halt()
		delete(m.checkers, k)
	}
	for _, srv := range m.servers {
		srv.hc.CloseIdleConnections()
	}
	for id, c := range m.caches {
		c.retire(&m.wg)
		delete(m.caches, id)
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// Snapshot reports every server of the active set, in config order.
func (m *Manager) Snapshot() []ServerState {
	m.mu.Lock()
	s := m.active
	m.mu.Unlock()
	if s == nil {
		return nil
	}
	now := m.now().UnixNano()
	var out []ServerState
	for _, p := range s.pools {
		for _, srv := range p.servers {
			st := srv.st
			ejected := st.ejectedUntil.Load() > now
			up := st.up.Load()
			out = append(out, ServerState{
				Pool:    p.name,
				Addr:    srv.addr,
				Healthy: up && !ejected,
				Up:      up,
				Ejected: ejected,
				Pending: st.pending.Load(),
				Fails:   int(st.fails.Load()),
			})
		}
	}
	return out
}

const idleConnDuration = 4 * time.Second

// clientSettings are what a connection pool is built from; equal settings
// on reload keep the pool and its warm connections.
type clientSettings struct {
	connect, read, write time.Duration
	maxConns             int
}

func newHostClient(addr string, cs clientSettings) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:         addr,
		Dial:         dialFunc(cs.connect),
		ReadTimeout:  cs.read,
		WriteTimeout: cs.write,
		MaxConns:     cs.maxConns,
		// A burst that finds every connection busy queues briefly instead
		// of failing at once; bounded like a connect.
		MaxConnWaitTimeout: cs.connect,
		// Retries are ours (other server, dial errors only): fasthttp's own
		// would resend an idempotent request to the same server after it
		// may have arrived.
		MaxIdemponentCallAttempts: 1,
		// Since a request on a connection the origin closed while idle is
		// not retried, drop idle connections before common origin
		// keep-alive timeouts (Node.js: 5 s) close them under us.
		MaxIdleConnDuration:      idleConnDuration,
		NoDefaultUserAgentHeader: true,
		// Forward the path byte for byte; routing already used the
		// normalized one.
		DisablePathNormalizing: true,
		SecureErrorLogMessage:  true,
	}
}
