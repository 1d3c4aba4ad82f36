package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/filters"
	"flashgate/orders/deadline"
	"flashgate/orders/order"
	"flashgate/orders/stock"
	"flashgate/proxy/dashboard"
	"flashgate/proxy/tlsterm"
	"flashgate/sale"
	"flashgate/sale/api"
	"flashgate/sale/catalog"
	"flashgate/sale/push"
	"flashgate/upstream"
)

// Options configure a Server beyond its config file.
type Options struct {
	// ConfigPath is re-read on reload. Empty disables file reloads.
	ConfigPath string
	Logger     *slog.Logger
	// Now returns unix nanoseconds; tests inject a clock.
	Now func() int64
	// Version is reported by /healthz and the build-info metric.
	Version string
	// TestRedisDial is for fault tests only (cmd/proxy -test-redis-dial):
	// every dial to a Redis address that is a key goes to its value (see
	// stock.Options.TestDialMap).
	TestRedisDial map[string]string
}

// Server is one edge process.
type Server struct {
	opts Options
	log  *slog.Logger
	env  *Env
	m    *serverMetrics

	snap     atomic.Pointer[Snapshot]
	version  atomic.Uint64
	reloadMu sync.Mutex
	// lastReload describes the last reload attempt for /admin/config and logs.
	lastReload atomic.Pointer[ReloadResult]

	sale *sale.Service
	// sweeper releases unpaid orders past their pay deadline (wire.go).
	sweeper *deadline.Sweeper
	// events is the event-stream hub (nil when events.disabled).
	events *push.Hub
	store  *stock.Store
	dash   *dashboard.Handler
	orders *pipeline
	// history is the charts' ring, filled once a second by the sampler
	// (charts.go) from m.charts, the `do` answers per sale.
	history    *dashboard.History
	stopCharts context.CancelFunc
	chartsDone chan struct{}

	// realServers names the backing services this process runs on (not
	// the embedded stand-ins), set once when it is assembled.
	realServers []string

	// wallClock: opts.Now is the real clock, so Handle takes the
	// request's NowNano from the monotonic reading of its latency (clock).
	wallClock bool
	clock     reqClock

	// stopRooms ends the route rooms' upkeep (roomsLoop).
	stopRooms context.CancelFunc

	draining atomic.Bool
	sampleN  atomic.Uint64
	reqPool  sync.Pool

	public, admin *fasthttp.Server
	// tls terminates TLS on the shopper listener (nil: plain HTTP). Whether
	// it exists is fixed at start; its certificates follow reloads.
	tls *tlsterm.Terminator
}

// ReloadResult describes one reload attempt.
type ReloadResult struct {
	At      time.Time `json:"at"`
	Trigger string    `json:"trigger"`
	Version uint64    `json:"version"`
	Error   string    `json:"error,omitempty"`
}

// Check compiles doc as New would, without connecting to anything or
// starting anything: `proxy -t`.
func Check(doc *conf.Document) (*Snapshot, error) {
	env := &Env{
		Zones:     filters.NewZones(),
		Upstreams: upstream.NewManager(slog.New(slog.DiscardHandler)),
		Sales:     catalog.NewRegistry(),
		Start:     time.Now(),
		CheckOnly: true,
	}
	return Compile(doc, env, 1)
}

// New compiles doc into the first snapshot, connects to Redis and Kafka (or
// starts their embedded stand-ins) and warms the sales. It starts no
// listener.
func New(doc *conf.Document, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	wallClock := opts.Now == nil
	if wallClock {
		opts.Now = func() int64 { return time.Now().UnixNano() }
	}
	s := &Server{opts: opts, log: opts.Logger, wallClock: wallClock}
	s.clock.reanchor(0)
	cfg := doc.Config
	bought, err := catalog.NewBoughtCache(cfg.Sale.BoughtCacheSize, cfg.Sale.BoughtCacheTTL)
	if err != nil {
		return nil, err
	}
	s.env = &Env{
		Zones:                 filters.NewZones(),
		Upstreams:             upstream.NewManager(opts.Logger),
		Now:                   opts.Now,
		Sales:                 catalog.NewRegistry(),
		Bought:                bought,
		Start:                 time.Unix(0, opts.Now()),
		FallbackSessionSecret: randomBytes(32),
		FallbackTokenSecret:   randomBytes(32),
		Log:                   opts.Logger,
	}
	s.m = newServerMetrics(s.env.Zones, s.env.Upstreams, opts.Version)
	s.env.Upstreams.OnResponse = s.m.observeUpstream
	// The whole document is checked before anything connects; the snapshot
	// served is compiled by assemble once the Redis store is open (filters
	// with policy redis are built on it).
	s.env.CheckOnly = true
	_, err = Compile(doc, s.env, 0)
	s.env.CheckOnly = false
	if err != nil {
		return nil, err
	}
	parts, snap, err := s.assemble(doc)
	if err != nil {
		return nil, err
	}
	s.store, s.orders, s.events, s.sale, s.sweeper = parts.store, parts.orders, parts.events, parts.sale, parts.sweeper
	if s.events != nil {
		s.events.RegisterMetrics(&s.m.reg)
	}
	s.sale.RegisterMetrics(&s.m.reg)
	s.orders.registerMetrics(&s.m.reg)
	s.registerDeadlineMetrics()
	s.snap.Store(snap)
	s.sweeper.Start()
	s.startRooms()
	s.env.Upstreams.Activate(snap.Upstreams)
	s.lastReload.Store(&ReloadResult{At: snap.LoadedAt, Trigger: "start", Version: snap.Version})
	s.m.lastReloadOK.Store(true)
	s.m.lastReloadUnix.Store(snap.LoadedAt.Unix())
	s.reqPool.New = func() any { return new(filters.Request) }
	s.history = dashboard.NewHistory()
	for _, id := range s.productIDs() {
		s.m.charts.get(id) // counted from the first answer on
	}
	s.dash = dashboard.New(s.dashboardSnapshot, s.history)
	cctx, stopCharts := context.WithCancel(context.Background())
	s.stopCharts, s.chartsDone = stopCharts, make(chan struct{})
	go func() { defer close(s.chartsDone); s.runCharts(cctx, time.Second) }()
	if snap.TLS != nil {
		s.tls = tlsterm.New(doc.Config.Listen.TLS, snap.TLS, tlsterm.Options{Log: opts.Logger})
		s.tls.RegisterMetrics(&s.m.reg)
	}
	s.public = s.newPublicServer(doc.Config)
	s.admin = &fasthttp.Server{
		Handler:            s.handleAdmin,
		Logger:             fasthttpLogger{s.log, "admin"},
		Name:               "flashgate-admin",
		ReadTimeout:        10 * time.Second,
		WriteTimeout:       30 * time.Second,
		IdleTimeout:        60 * time.Second,
		MaxRequestBodySize: 1 << 20,
		Concurrency:        256,
		NoDefaultDate:      true,
	}
	return s, nil
}

// Snapshot returns the configuration in force.
func (s *Server) Snapshot() *Snapshot { return s.snap.Load() }

func (s *Server) newPublicServer(cfg *conf.Config) *fasthttp.Server {
	l := cfg.Listen
	return &fasthttp.Server{
		Handler:            s.Handle,
		ErrorHandler:       s.handleReadError,
		Logger:             fasthttpLogger{s.log, "shopper"},
		ReadTimeout:        l.ReadTimeout,
		WriteTimeout:       l.WriteTimeout,
		IdleTimeout:        l.IdleTimeout,
		MaxRequestBodySize: l.MaxRequestBodySize,
		ReadBufferSize:     l.ReadBufferSize,
		Concurrency:        l.Concurrency,
		MaxConnsPerIP:      l.MaxConnsPerIP,
		// Request header names stay normalized: the filters, the session and
		// the page look headers up by their canonical names, and a client
		// may send any case (HTTP/2 gateways send lower case).
		DisableHeaderNamesNormalizing: false,
		// No "Server: flashgate" on the edge's own answers: the header is
		// optional (RFC 9110 10.2.4), names the software to whoever probes
		// it, and is one more line to write per answer. Proxied answers
		// keep the origin's Server header, if it sent one. (fasthttp
		// writes one whenever Name is set, so it is not.)
		NoDefaultServerHeader: true,
		// The edge reads no form: the sale API is JSON and the origin pools
		// pass the body on. fasthttp would otherwise parse every multipart
		// body before the handler (spooling large files to disk on the
		// edge) and forward a re-encoded form, not the bytes the client
		// sent (the part headers it does not know, the preamble and the
		// epilogue were lost).
		DisablePreParseMultipartForm: true,
		// Date stays: an origin server with a clock must send it on every
		// 2xx-4xx answer (RFC 9110 6.6.1) and caches age the page by it;
		// fasthttp writes a line it renders once a second.
		NoDefaultDate: false,
		// A default Content-Type is never used: every answer of the edge
		// sets its own, and the origin pools pass an absent one through.
		NoDefaultContentType: false,
		CloseOnShutdown:      true,
		// Event streams park their connection in the push hub once the
		// handler returns (no goroutine, no buffers per waiting shopper).
		KeepHijackedConns: true,
		ReduceMemoryUsage: false,
		// Nothing on the shopper path reads ctx.Time() (Handle reads the
		// clock itself, the origin pools time their own wait), so fasthttp
		// need not read it for every request.
		LazyRequestTime: true,
	}
}

// Serve runs the shopper listener and, if adminLn is not nil, the admin
// listener until Shutdown. It returns the first listener error. With
// listen.tls the shopper listener speaks TLS only.
func (s *Server) Serve(ln, adminLn net.Listener) error {
	ln = lazyListener{ln}
	if s.tls != nil {
		ln = s.tls.Listener(ln)
	}
	errc := make(chan error, 2)
	go func() { errc <- s.public.Serve(ln) }()
	if adminLn != nil {
		go func() { errc <- s.admin.Serve(adminLn) }()
	}
	return <-errc
}

// lazyListener hands out the shoppers' connections as upstream.YieldConn,
// a LazyConn: fasthttp sets three deadlines per keep-alive request (the
// idle wait, the read, the write), each a timer update in the runtime;
// through LazyConn a busy connection's reach the timers about once per
// 100 ms instead of three times per request. Every timeout still fires, at
// most 1/16 of it (and at most 100 ms) late, never early. And the read for
// a connection's next request yields first (YieldConn): right after the
// answer is written that read finds nothing (an EAGAIN read, a park and a
// wake-up through the poller, which a bare fasthttp server pays on every
// keep-alive request); after the other connections' requests it mostly
// finds the next request in.
type lazyListener struct{ net.Listener }

func (l lazyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return upstream.NewYieldConn(c), nil
}

// Shutdown stops accepting, waits for in-flight requests until ctx ends,
// then stops background work. /readyz turns 503 first so a load balancer
// stops sending while we drain.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	s.dash.Close()
	err := s.public.ShutdownWithContext(ctx)
	aerr := s.admin.ShutdownWithContext(ctx)
	if s.events != nil {
		s.events.Close() // hijacked streams are not the server's to close
	}
	if s.tls != nil {
		s.tls.Close()
	}
	s.env.Upstreams.Close()
	s.stopRooms()
	s.stopCharts()
	<-s.chartsDone
	s.sale.Stop()
	s.sweeper.Close() // before the publisher it publishes with
	perr := s.orders.close()
	serr := s.store.Close()
	return errors.Join(err, aerr, perr, serr)
}

// Reload re-reads the config file and swaps the snapshot if, and only if,
// the new file compiles. A failure keeps the running snapshot.
func (s *Server) Reload(trigger string) error {
	if s.opts.ConfigPath == "" {
		return errors.New("no config file to reload")
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	now := time.Now()
	s.m.lastReloadUnix.Store(now.Unix())
	doc, err := conf.LoadFile(s.opts.ConfigPath)
	if err == nil {
		err = s.checkReloadDemoLogin(doc)
	}
	var snap *Snapshot
	if err == nil {
		snap, err = Compile(doc, s.env, s.version.Add(1))
	}
	if err != nil {
		s.m.reloadFailed.Inc()
		s.m.lastReloadOK.Store(false)
		s.lastReload.Store(&ReloadResult{At: now, Trigger: trigger, Version: s.snap.Load().Version, Error: err.Error()})
		s.log.Error("config reload failed; keeping the running configuration", "trigger", trigger, "file", s.opts.ConfigPath, "err", err)
		return err
	}
	old := s.snap.Swap(snap)
	s.env.Upstreams.Activate(snap.Upstreams)
	if s.tls != nil && snap.TLS != nil {
		// New handshakes get the new certificates; connections keep theirs.
		s.tls.Apply(snap.Doc.Config.Listen.TLS, snap.TLS)
	}
	actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := s.sale.Apply(actx, snap.Sale); err != nil {
		s.log.Warn("sale warm-up after reload incomplete; the refresh loop retries", "err", err)
	}
	cancel()
	s.m.reloadOK.Inc()
	s.m.lastReloadOK.Store(true)
	s.lastReload.Store(&ReloadResult{At: now, Trigger: trigger, Version: snap.Version})
	oc, nc := old.Doc.Config, snap.Doc.Config
	if !oc.Listen.RestartEqual(nc.Listen) || oc.Admin.Addr != nc.Admin.Addr || oc.Reload != nc.Reload || !oc.Redis.Equal(nc.Redis) || oc.NodeID != nc.NodeID {
		s.log.Warn("listen (but listen.tls's certificates and hsts), admin.addr, reload, redis and node_id take effect on restart; the running edge keeps its old settings for them", "trigger", trigger)
	}
	s.log.Info("config reloaded", "trigger", trigger, "version", snap.Version, "filters", snap.APIChain.Len())
	s.warnDemoLogin(nc, trigger)
	return nil
}

// LastReload reports the last reload attempt.
func (s *Server) LastReload() ReloadResult { return *s.lastReload.Load() }

var (
	prefixAPI    = []byte("/api/seckill/")
	pathLogin    = []byte("/api/login")
	prefixSale   = []byte("/seckill/")
	prefixAssets = []byte("/seckill/_static/")
	pathWebhook  = []byte("/api/payments/webhook")
)

func classify(path []byte) route {
	switch {
	case bytes.HasPrefix(path, prefixAPI), bytes.Equal(path, pathLogin):
		return routeAPI
	case bytes.HasPrefix(path, prefixAssets):
		return routeAsset
	case bytes.HasPrefix(path, prefixSale):
		return routePage
	case bytes.Equal(path, pathWebhook):
		return routeWebhook
	}
	return routeOrigin
}

// Handle is the shopper-facing request handler.
func (s *Server) Handle(ctx *fasthttp.RequestCtx) {
	start := upstream.MonoNow()
	s.m.active.Add(1)
	snap := s.snap.Load()
	r := s.reqPool.Get().(*filters.Request)
	r.Ctx = ctx
	r.ClientIP = snap.RealIP.Resolve(ctx)
	if s.wallClock {
		r.NowNano = s.clock.wall(start)
	} else {
		r.NowNano = s.opts.Now()
	}

	path := ctx.Path()
	rt := classify(path)
	chain := snap.EdgeChain
	if rt == routeAPI {
		chain = snap.APIChain
	}
	var v filters.Verdict
	isDo := false
	if rt == routeAPI {
		if rej := sale.Parse(&r.Call, snap.Sale.MaxBody); rej != nil {
			v.Reject = rej
		}
		isDo = r.Call.Endpoint == api.EndpointDo
	}
	if v.Reject == nil {
		v = chain.Run(r)
	}
	if v.Reject != nil {
		v.Write(ctx)
	} else {
		if v.Delay > 0 {
			// limit_req without nodelay: hold the request to pace it, as nginx does.
			time.Sleep(v.Delay)
		}
		rt = s.dispatch(ctx, snap, r, rt, path)
	}
	if snap.HSTS != nil && ctx.IsTLS() {
		writeHSTS(&ctx.Response.Header, snap.HSTS)
	}
	status := ctx.Response.StatusCode()
	d := upstream.MonoNow() - start
	if isDo {
		s.m.charts.observe(r.Call.ProductID, status, d)
	}
	r.Finish()
	r.Reset()
	s.reqPool.Put(r)

	s.m.observeRequest(rt, status, d)
	s.m.active.Add(-1)
	s.accessLog(ctx, snap, rt, status, d)
}

func (s *Server) dispatch(ctx *fasthttp.RequestCtx, snap *Snapshot, r *filters.Request, rt route, path []byte) route {
	switch rt {
	case routeAPI:
		s.sale.Handle(&r.Call)
	case routeWebhook:
		s.paymentWebhook(ctx, snap)
	case routeAsset:
		snap.Static.ServeAsset(ctx, path[len(prefixAssets):])
	case routePage:
		// /seckill/{id}; anything deeper is not a page.
		id := path[len(prefixSale):]
		if !order.ValidProductID(id) {
			api.NotFound.Write(ctx)
			return routeNotFound
		}
		snap.Static.ServePage(ctx)
	default:
		up := snap.Upstreams.Route(ctx.Host(), path)
		if up == nil {
			api.NotFound.Write(ctx)
			return routeNotFound
		}
		if rm := snap.Rooms[up]; rm != nil {
			s.serveRoom(ctx, snap, r, up, rm)
			return rt
		}
		up.Serve(ctx, r.ClientIP, snap.RealIP)
	}
	return rt
}

var headerHSTS = []byte("Strict-Transport-Security")

// writeHSTS adds Strict-Transport-Security to an HTTPS response unless it
// has one: an origin's own policy for its paths wins, as with nginx's
// proxy_pass and an add_header on the same name.
func writeHSTS(h *fasthttp.ResponseHeader, value []byte) {
	if len(h.PeekBytes(headerHSTS)) == 0 {
		h.SetBytesKV(headerHSTS, value)
	}
}

// accessLog writes one line per sampled request; every 5xx is logged.
func (s *Server) accessLog(ctx *fasthttp.RequestCtx, snap *Snapshot, rt route, status int, d time.Duration) {
	every := snap.AccessSampleEvery
	if status < 500 && (every == 0 || s.sampleN.Add(1)%every != 0) {
		return
	}
	// The trace id: the one the origin got for a proxied request, a
	// client's valid one otherwise, "-" without (upstream.TraceID).
	trace := "-"
	if id := upstream.TraceID(&ctx.Request.Header); id != nil {
		trace = string(id)
	}
	s.log.LogAttrs(context.Background(), slog.LevelInfo, "access",
		slog.String("method", string(ctx.Method())),
		slog.String("path", string(ctx.Path())),
		slog.String("route", routeNames[rt]),
		slog.Int("status", status),
		slog.String("client", snap.RealIP.Resolve(ctx).String()),
		slog.Int64("bytes", int64(len(ctx.Response.Body()))),
		slog.Float64("ms", float64(d.Microseconds())/1000),
		slog.String("trace", trace),
	)
}

// handleReadError answers requests fasthttp could not parse, in the API's
// error format instead of fasthttp's plain text.
func (s *Server) handleReadError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		api.TooLarge.Write(ctx)
	case errors.As(err, &small):
		api.HeadersTooLarge.Write(ctx)
	default:
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			api.Timeout.Write(ctx)
			break
		}
		api.BadRequest.Write(ctx)
	}
	ctx.SetConnectionClose()
	s.logReadError(ctx, err)
}

// Describe is used by `proxy -t` and logs.
func Describe(snap *Snapshot) string {
	c := snap.Doc.Config
	tls := ""
	if snap.TLS != nil {
		tls = " (tls, " + snap.TLS.String() + ")"
	}
	return fmt.Sprintf("listen %s%s, admin %s, %d filters, %d pools, %d routes", c.Listen.Addr, tls, c.Admin.Addr, len(c.Filters), len(c.Upstreams.Pools), len(c.Upstreams.Routes))
}

// Warnings are what `proxy -t` reports about a valid config: the
// certificates due for renewal.
func Warnings(snap *Snapshot) []string {
	if snap.TLS == nil {
		return nil
	}
	return snap.TLS.Expiring(time.Now(), tlsterm.ExpiryWarning)
}

// Sale exposes the sale service (admin API, tests).
func (s *Server) Sale() *sale.Service { return s.sale }

// Store exposes the Redis side (tests, reconcile).
func (s *Server) Store() *stock.Store { return s.store }

// Events exposes the event-stream hub, nil when events.disabled (tests).
func (s *Server) Events() *push.Hub { return s.events }
