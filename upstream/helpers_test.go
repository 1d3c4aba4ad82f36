package upstream

import (
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/internal/syncbuf"
)

// startOrigin runs a fasthttp server on a loopback port until the test ends.
func startOrigin(t testing.TB, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fasthttp.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = s.Shutdown()
		<-done
	})
	return ln.Addr().String()
}

// idOrigin answers every request with its id as the body.
func idOrigin(t testing.TB, id string) string {
	return startOrigin(t, func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(id) })
}

// deadAddr is a loopback address nothing listens on: the listener is closed
// before use, so connecting is refused.
func deadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

var testClientIP = netip.MustParseAddr("203.0.113.7")

// edge is a front server on loopback that routes with the current Set and
// proxies with Serve, like the proxy package does.
type edge struct {
	set  atomic.Pointer[Set]
	addr string
	c    *fasthttp.HostClient
}

func startEdge(t testing.TB, s *Set) *edge {
	t.Helper()
	e := &edge{}
	e.set.Store(s)
	e.addr = startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		p := e.set.Load().Match(ctx.Host(), ctx.Path())
		if p == nil {
			ctx.SetStatusCode(fasthttp.StatusNotFound)
			return
		}
		p.Serve(ctx, testClientIP, nil)
	})
	e.c = &fasthttp.HostClient{Addr: e.addr, MaxIdemponentCallAttempts: 1}
	return e
}

// do sends one request through the edge and returns status and body.
func (e *edge) do(t testing.TB, method, host, path string, body []byte) (int, string, *fasthttp.Response) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), new(fasthttp.Response)
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	req.Header.SetHost(host)
	if body != nil {
		req.SetBody(body)
	}
	if err := e.c.DoTimeout(req, resp, 10*time.Second); err != nil {
		t.Fatalf("%s %s%s: %v", method, host, path, err)
	}
	return resp.StatusCode(), string(resp.Body()), resp
}

// newTestManager logs into a buffer the test can search.
func newTestManager(t testing.TB) (*Manager, *syncbuf.Buffer) {
	lb := &syncbuf.Buffer{}
	m := NewManager(slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(m.Close)
	return m, lb
}

// fakeClock drives passive ejection without waiting.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func stateOf(m *Manager, pool, addr string) ServerState {
	for _, s := range m.Snapshot() {
		if s.Pool == pool && s.Addr == addr {
			return s
		}
	}
	return ServerState{}
}

func mustBuild(t testing.TB, m *Manager, c conf.UpstreamsConfig) *Set {
	t.Helper()
	s, err := m.Build(c.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	m.Activate(s)
	return s
}

func intPtr(n int) *int { return &n }

// tcpPair is a connected loopback TCP pair, closed when the test ends.
func tcpPair(tb testing.TB) (client, server net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	if client, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { client.Close() })
	if server, err = ln.Accept(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { server.Close() })
	return client, server
}
