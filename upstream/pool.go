package upstream

import (
	"errors"
	"flashgate/conf"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/sale/api"
)

// Pool is a named group of origin servers with its balancing, timeouts,
// retries and failure handling. It is part of a Set and immutable; the
// mutable per-server state it points to lives in the Manager.
type Pool struct {
	name         string
	m            *Manager
	servers      []*server
	leastPending bool
	maxRetries   int
	maxFails     int // 0: passive ejection off
	failTimeout  time.Duration
	health       conf.HealthConfig
	connect      time.Duration
	// underscores: upstreams.underscores_in_headers.
	underscores bool

	rr atomic.Uint32
	// Failure logs are limited to one line per second per pool: an origin
	// outage at sale traffic would otherwise write a line per request.
	logSecond  atomic.Int64
	suppressed atomic.Int64
}

type server struct {
	addr string
	st   *serverState
	hc   *fasthttp.HostClient
	cs   clientSettings
}

// Name returns the pool's configured name.
func (p *Pool) Name() string { return p.name }

// call is the per-request scratch: the outgoing request and a buffer for
// the forwarding headers, pooled so a proxied request allocates nothing.
type call struct {
	req fasthttp.Request
	buf []byte
}

var callPool = sync.Pool{New: func() any { return new(call) }}

// TrustedProxies says which peers are trusted proxies (real_ip's
// trusted_proxies: *filters.RealIP).
type TrustedProxies interface {
	Trusted(netip.Addr) bool
}

// Serve proxies the request to one of the pool's servers and writes the
// origin's answer (or a 502/504 JSON error) into ctx.Response, replacing
// anything set there before.
//
// What the origin sees is the client's request without:
//   - the hop-by-hop headers (RFC 9110 §7.6.1) and every header the
//     Connection header names, Expect (the edge answered 100-continue), and
//     Proxy and every other Proxy-*;
//   - the headers nginx ignores (ignore_invalid_headers): a name with
//     anything but letters, digits and '-', '_' being let through only with
//     upstreams.underscores_in_headers and never in a spelling of a header
//     listed here (X_Real_IP);
//   - the forwarding headers the client sent, which the edge writes itself:
//     X-Forwarded-For = the immediate peer, X-Real-IP = clientIP (the real
//     client as resolved by the caller; the peer if invalid),
//     X-Forwarded-Proto = http or https (of the edge's listener); and
//     X-Forwarded-Host, X-Forwarded-Port, Forwarded, and the scheme headers
//     Rack and gunicorn read (X-Forwarded-Scheme, -Ssl, -Protocol), which
//     it does not. When the peer is one of proxies (real_ip's trusted
//     proxies), its testimony stands: X-Forwarded-For is its list extended
//     with the peer (nginx $proxy_add_x_forwarded_for), and its
//     X-Forwarded-Proto, -Host, -Port, -Scheme, -Ssl, -Protocol and
//     Forwarded pass on. The edge's own are written after the hop-by-hop
//     headers are removed, so a Connection header naming them cannot
//     remove them (a proxy's X-Forwarded-Proto it names is replaced by the
//     edge's).
//
// The Host header goes exactly as the client sent it (nginx
// `proxy_set_header Host $host`: origins do virtual hosting and build links
// with it); for an absolute-form request-target, the target's host, which
// the route was chosen by. It always speaks HTTP/1.1 to keep connections
// alive.
//
// Refused, not proxied, and the connection closed: TRACE and CONNECT (405),
// a method other than upper-case letters, '_' and '-', and a header name
// with a space (400), as nginx does; userinfo in an absolute request-target
// (400: it would become Authorization).
//
// The origin also gets a traceparent the edge wrote (trace.go), and the
// client's request keeps it for the access log (TraceID).
//
// Bodies are buffered both ways, within the edge server's
// MaxRequestBodySize and without a response limit: origins here serve
// pages and API answers, not downloads. Upgrades (WebSocket) are not
// proxied: Upgrade is hop-by-hop and is dropped.
//
// A bodyless GET, HEAD or OPTIONS whose connection cannot be made is
// retried on another server, up to max_retries; nothing else is retried,
// since the origin may already have acted on it.
func (p *Pool) Serve(ctx *fasthttp.RequestCtx, clientIP netip.Addr, proxies TrustedProxies) {
	p.serve(ctx, clientIP, proxies, false)
}

// serve is Serve; full: the request is the cache's, sent without the
// client's conditional headers.
func (p *Pool) serve(ctx *fasthttp.RequestCtx, clientIP netip.Addr, proxies TrustedProxies, full bool) {
	if rej := requestRejection(ctx); rej != nil {
		refuse(ctx, rej)
		return
	}
	from := hop{clientIP: clientIP, underscores: p.underscores, full: full}
	if proxies != nil {
		peer, _ := netip.AddrFromSlice(ctx.RemoteIP())
		from.trusted = proxies.Trusted(peer.Unmap())
	}
	c := callPool.Get().(*call)
	out := &c.req
	var ok bool
	if c.buf, ok = prepare(out, ctx, from, c.buf); !ok {
		out.Reset()
		callPool.Put(c)
		refuse(ctx, api.BadRequest)
		return
	}
	// The access log names the trace the origin got (TraceID).
	ctx.Request.Header.SetCanonical(keyTraceparent, c.buf)

	// OnResponse's time is the wait for the origin: from here, with the
	// request ready, to the last attempt's answer or failure. ctx.Time()
	// would be cheaper but is the request's arrival: the filters, a
	// limit_req delay and the header copy would count as the origin's.
	hook := p.m.OnResponse
	var start time.Duration
	if hook != nil {
		start = MonoNow()
	}

	retries := 0
	if h := &out.Header; (h.IsGet() || h.IsHead() || h.IsOptions()) && len(out.Body()) == 0 {
		retries = p.maxRetries
	}
	var tried [conf.MaxRetriesLimit + 1]int
	ntried := 0
	status, failStatus := 0, 0
	for {
		srv, idx := p.pick(tried[:ntried])
		if srv == nil {
			p.logFailure(nil, errNoServer, "no healthy server", ntried)
			failStatus = fasthttp.StatusBadGateway
			break
		}
		tried[ntried] = idx
		ntried++
		if len(out.Header.Host()) == 0 {
			// HTTP/1.0 without Host: nginx would send the server name.
			out.Header.SetHost(srv.addr)
		}
		// Keep the origin's answer as it is: no Content-Type it did not send.
		ctx.Response.Header.SetNoDefaultContentType(true)
		srv.st.pending.Add(1)
		err := srv.hc.Do(out, &ctx.Response)
		srv.st.pending.Add(-1)
		if err == nil {
			p.succeeded(srv)
			c.buf = stripHopByHop(&ctx.Response.Header, responsePresent(&ctx.Response.Header), c.buf[:0])
			status = ctx.Response.StatusCode()
			break
		}
		kind := classify(err)
		if kind != failBusy {
			// A full connection pool is our own limit, not the server's fault.
			p.failed(srv)
		}
		if (kind == failDial || kind == failBusy) && ntried <= retries && ntried < len(p.servers) {
			p.logFailure(srv, err, "retrying on another server", ntried)
			continue
		}
		p.logFailure(srv, err, "request failed", ntried)
		failStatus = fasthttp.StatusBadGateway
		if kind == failTimeout {
			failStatus = fasthttp.StatusGatewayTimeout
		}
		break
	}
	var waited time.Duration
	if hook != nil {
		waited = MonoNow() - start
	}
	if failStatus != 0 {
		writeError(ctx, failStatus)
		status = failStatus
	}
	out.Reset()
	callPool.Put(c)
	if hook != nil {
		hook(p.name, status, waited)
	}
}

// MonoBase anchors MonoNow.
var MonoBase = time.Now()

// MonoNow reads the monotonic clock only: time.Since of a time.Time that
// carries a monotonic reading skips the wall clock, so it costs one vDSO
// clock_gettime where time.Now costs two (wall and monotonic). The edge's
// request timing (proxy.reqClock) uses it too.
func MonoNow() time.Duration { return time.Since(MonoBase) }

// refuse answers a request the edge does not proxy and closes the
// connection: a client that sent it may not frame what follows as we would.
func refuse(ctx *fasthttp.RequestCtx, rej *api.Rejection) {
	rej.Write(ctx)
	ctx.SetConnectionClose()
}

func writeError(ctx *fasthttp.RequestCtx, status int) {
	if status == fasthttp.StatusGatewayTimeout {
		api.OriginTimeout.Write(ctx)
	} else {
		api.OriginUnavailable.Write(ctx)
	}
}

// pick chooses an available server not tried yet. Round robin starts at the
// next index and walks on past unavailable servers; least_pending takes the
// fewest in-flight requests, ties broken by that same rotating start so
// idle pools still spread.
func (p *Pool) pick(tried []int) (*server, int) {
	n := len(p.servers)
	start := int((p.rr.Add(1) - 1) % uint32(n))
	var now int64 // read the clock only if some server was ejected
	best, bestIdx := (*server)(nil), -1
	for i := 0; i < n; i++ {
		idx := (start + i) % n
		srv := p.servers[idx]
		if !srv.st.up.Load() || contains(tried, idx) {
			continue
		}
		if until := srv.st.ejectedUntil.Load(); until != 0 {
			if now == 0 {
				now = p.m.now().UnixNano()
			}
			if now < until {
				continue
			}
		}
		if !p.leastPending {
			return srv, idx
		}
		if best == nil || srv.st.pending.Load() < best.st.pending.Load() {
			best, bestIdx = srv, idx
		}
	}
	return best, bestIdx
}

func contains(list []int, x int) bool {
	for _, v := range list {
		if v == x {
			return true
		}
	}
	return false
}

// succeeded closes the passive failure window; two atomic loads when there
// is nothing to clear, so the hot path does not write shared memory.
func (p *Pool) succeeded(srv *server) {
	st := srv.st
	if st.fails.Load() == 0 && st.ejectedUntil.Load() == 0 {
		return
	}
	st.mu.Lock()
	wasEjected := st.ejectedUntil.Load() != 0
	st.fails.Store(0)
	st.ejectedUntil.Store(0)
	st.mu.Unlock()
	if wasEjected {
		p.m.log.Info("upstream server recovered", "pool", p.name, "server", srv.addr)
	}
}

// failed counts a passive failure: max_fails within fail_timeout eject the
// server for fail_timeout (nginx semantics). A server that failed again
// after its ejection ended, with no success between, is ejected at once.
func (p *Pool) failed(srv *server) {
	if p.maxFails <= 0 {
		return
	}
	st := srv.st
	now := p.m.now().UnixNano()
	ft := int64(p.failTimeout)
	st.mu.Lock()
	eject := false
	switch {
	case st.ejectedUntil.Load() != 0:
		eject = st.ejectedUntil.Load() <= now // already ejected: nothing new
	default:
		if st.fails.Load() == 0 || now-st.windowStart > ft {
			st.fails.Store(0)
			st.windowStart = now
		}
		eject = int(st.fails.Add(1)) >= p.maxFails
	}
	if eject {
		st.ejectedUntil.Store(now + ft)
		st.fails.Store(0)
	}
	st.mu.Unlock()
	if eject {
		p.m.log.Warn("upstream server ejected", "pool", p.name, "server", srv.addr,
			"max_fails", p.maxFails, "for", p.failTimeout)
	}
}

var errNoServer = errors.New("no server available (all down or ejected)")

// logFailure writes the detail the client never sees, at most once a second
// per pool, with the number of lines suppressed since the last one.
func (p *Pool) logFailure(srv *server, err error, msg string, attempt int) {
	sec := time.Now().Unix()
	last := p.logSecond.Load()
	if last == sec || !p.logSecond.CompareAndSwap(last, sec) {
		p.suppressed.Add(1)
		return
	}
	addr := ""
	if srv != nil {
		addr = srv.addr
	}
	p.m.log.Warn("upstream "+msg, "pool", p.name, "server", addr, "attempt", attempt,
		"err", err, "suppressed", p.suppressed.Swap(0))
}

type failKind int

const (
	failOther failKind = iota // the request may have reached the origin
	failDial                  // no connection: the origin saw nothing
	failBusy                  // connection limit reached: the origin saw nothing
	failTimeout
)

func classify(err error) failKind {
	var de *dialError
	if errors.As(err, &de) {
		return failDial
	}
	if errors.Is(err, fasthttp.ErrNoFreeConns) {
		return failBusy
	}
	if errors.Is(err, fasthttp.ErrTimeout) {
		return failTimeout
	}
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		return failTimeout
	}
	return failOther
}

// dialError marks failures to connect, the only ones known to be safe to
// retry elsewhere: fasthttp reports them like any other error.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

func dialFunc(timeout time.Duration) fasthttp.DialFunc {
	return func(addr string) (net.Conn, error) {
		conn, err := fasthttp.DialTimeout(addr, timeout)
		if err != nil {
			return nil, &dialError{err}
		}
		return NewYieldConn(conn), nil
	}
}

// maxDeadlineSlack bounds how much later than asked a LazyConn's socket
// deadline may fall.
const maxDeadlineSlack = 100 * time.Millisecond

// LazyConn is a TCP connection that moves its socket deadlines forward in
// steps instead of on every request, as nginx defers a timer update that
// would move it by less than NGX_TIMER_LAZY_DELAY. fasthttp sets deadlines
// per request (the server: the idle wait, the read, the write; HostClient:
// the write and the read), each a timer update in the runtime and two more
// clock reads; at sale rates a connection serves a request every few
// milliseconds, so the deadline already on the socket, set a little further
// out than asked, still bounds the next request. A timeout fires at most its
// slack late (1/16 of it, at most 100 ms), never early: a deadline is kept
// only when it is not before the one asked.
//
// A read deadline reaches the socket at the next Read, not at once: the
// server asks for the read timeout once a request's first byte is in, and
// when the whole request came with it (as it does) no Read follows before
// the next idle wait replaces that deadline — so on a busy keep-alive
// connection neither reaches the runtime's timers. This departs from
// net.Conn in one point: a Read already blocked in another goroutine keeps
// the deadline it had. fasthttp's server and HostClient read and set a
// connection's deadlines from one goroutine at a time, and nothing else
// reads the connections LazyConn wraps (event streams write, and peek
// without waiting). Clearing a deadline is exact at the next Read; a write
// deadline and SetDeadline reach the socket at once.
//
// Every other method is the TCP connection's (SyscallConn, ReadFrom: the
// event streams' non-blocking sends and sendfile see through it). What a
// wrapper does lose: fasthttp writes an answer larger than its write
// buffer (4 KiB) as one writev only to a *net.TCPConn; through LazyConn it
// is a buffer's write and then the rest.
type LazyConn struct {
	*net.TCPConn
	read, write deadline
	// readAsk is the read deadline asked and not yet on the socket, when
	// readPending.
	readAsk     time.Time
	readPending bool
}

// NewLazyConn wraps conn in a LazyConn when it is a TCP connection, and
// returns it as it is otherwise.
func NewLazyConn(conn net.Conn) net.Conn {
	if tc, ok := conn.(*net.TCPConn); ok {
		return &LazyConn{TCPConn: tc}
	}
	return conn
}

// SetReadDeadline asks for a read deadline of t, which the next Read puts
// on the socket unless the one there already bounds it (see LazyConn).
func (c *LazyConn) SetReadDeadline(t time.Time) error {
	if c.read.covers(t) {
		c.readPending = false
		return nil
	}
	c.readAsk, c.readPending = t, true
	return nil
}

// Read reads from the connection under the read deadline last asked.
func (c *LazyConn) Read(p []byte) (int, error) {
	if c.readPending {
		c.readPending = false
		if err := c.read.set(c.readAsk, c.TCPConn.SetReadDeadline); err != nil {
			return 0, err
		}
	}
	return c.TCPConn.Read(p)
}

// SetWriteDeadline asks for a write deadline of t (see LazyConn).
func (c *LazyConn) SetWriteDeadline(t time.Time) error {
	return c.write.set(t, c.TCPConn.SetWriteDeadline)
}

// SetDeadline sets both exactly, as net.Conn's does.
func (c *LazyConn) SetDeadline(t time.Time) error {
	c.read, c.write, c.readPending = deadline{}, deadline{}, false
	if err := c.TCPConn.SetDeadline(t); err != nil {
		return err
	}
	c.read, c.write = deadline{at: t}, deadline{at: t}
	return nil
}

// YieldConn is a LazyConn whose first Read after a Write yields the
// processor first. On both sides of the edge the read that follows a write
// waits for the peer's reply to it — an origin's answer to the request just
// written, a kept-alive shopper's next request after the answer just
// written — so reading at once is mostly an EAGAIN read and a park on the
// poller, and a wake-up through it later. Letting the runnable goroutines
// (the other connections' requests) go first gives the reply time to
// arrive: on a busy edge the read then finds it. When no other goroutine
// is runnable the yield returns at once and the read is as before.
type YieldConn struct {
	LazyConn
	wrote bool
}

// NewYieldConn wraps conn in a YieldConn when it is a TCP connection, and
// returns it as it is otherwise.
func NewYieldConn(conn net.Conn) net.Conn {
	if tc, ok := conn.(*net.TCPConn); ok {
		return &YieldConn{LazyConn: LazyConn{TCPConn: tc}}
	}
	return conn
}

// Write writes p; the next Read yields first.
func (c *YieldConn) Write(p []byte) (int, error) {
	c.wrote = true
	return c.TCPConn.Write(p)
}

// Read reads as LazyConn's, after a yield when it is the first since a
// Write.
func (c *YieldConn) Read(p []byte) (int, error) {
	if c.wrote {
		c.wrote = false
		runtime.Gosched()
	}
	return c.LazyConn.Read(p)
}

// deadline is what is set on the socket: at (zero: none), slack later
// than was asked.
type deadline struct {
	at    time.Time
	slack time.Duration
}

// covers reports whether the deadline on the socket stands for t: none
// for none, else not before t and at most its slack after.
func (d *deadline) covers(t time.Time) bool {
	if t.IsZero() || d.at.IsZero() {
		return t.IsZero() == d.at.IsZero()
	}
	late := d.at.Sub(t)
	return late >= 0 && late <= d.slack
}

// set asks for a deadline of t: kept when the one on the socket covers it;
// else set anew, slack later.
func (d *deadline) set(t time.Time, set func(time.Time) error) error {
	if d.covers(t) {
		return nil
	}
	if t.IsZero() {
		*d = deadline{}
		return set(t)
	}
	slack := max(min(time.Until(t)/16, maxDeadlineSlack), 0)
	*d = deadline{} // unknown, should the set fail
	if err := set(t.Add(slack)); err != nil {
		return err
	}
	*d = deadline{at: t.Add(slack), slack: slack}
	return nil
}
