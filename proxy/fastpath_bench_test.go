package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/internal/redistest"
	"flashgate/orders/stock"
	"flashgate/sale/session"
)

// The edge's cheap paths against the floor of any fasthttp server: the same
// request bytes, through fasthttp's own connection loop (read, parse, the
// handler, write), answered by the edge's Server (its fasthttp settings, the
// router, the filter chain) and by a bare fasthttp handler that writes the
// same answer and does nothing else — what bench compare's "soldout" and
// "page" targets measure over loopback, without the network. Compare the
// pairs' cpu-ns/op (a ratio), not the absolute numbers:
//
//	go test -run '^$' -bench 'FastPath' -count 6 ./proxy/ | benchstat -col /server -

// replayConn is a client connection that sends one request per Read, n
// times, then EOF, and drops what the server writes after keeping its first
// response for the benchmark to check. Deadlines are accepted and ignored:
// the server still computes them, the runtime timer they would set is not
// ours to measure.
type replayConn struct {
	req   []byte
	left  int
	off   int
	first bytes.Buffer
	wrote bool
}

func (c *replayConn) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.req[c.off:])
	if c.off += n; c.off == len(c.req) {
		c.off = 0
		c.left--
	}
	return n, nil
}

func (c *replayConn) Write(p []byte) (int, error) {
	if !c.wrote {
		c.first.Write(p)
		c.wrote = true
	}
	return len(p), nil
}

func (c *replayConn) Close() error { return nil }

// The addresses are made once, as a net.TCPConn's are.
var (
	replayLocal  = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	replayRemote = &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5555}
)

func (c *replayConn) LocalAddr() net.Addr              { return replayLocal }
func (c *replayConn) RemoteAddr() net.Addr             { return replayRemote }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }

// serveReplay answers b.N copies of req on one keep-alive connection and
// checks the first answer starts with wantStatus.
func serveReplay(b *testing.B, srv *fasthttp.Server, req, wantStatus string) {
	b.Helper()
	check := &replayConn{req: []byte(req), left: 1}
	if err := srv.ServeConn(check); err != nil {
		b.Fatal(err)
	}
	if got := check.first.String(); !strings.HasPrefix(got, "HTTP/1.1 "+wantStatus) {
		b.Fatalf("answer: %q", got)
	}
	c := &replayConn{req: []byte(req), left: b.N}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	if err := srv.ServeConn(c); err != nil {
		b.Fatal(err)
	}
	// The process's CPU time per request: on a shared machine the wall
	// time counts the others' load, this mostly does not.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the user and system CPU time the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// barePeer is bench/peers/barefasthttp: default fasthttp settings and a
// handler that writes the answer it is given.
func barePeer(handler fasthttp.RequestHandler) *fasthttp.Server {
	return &fasthttp.Server{Handler: handler, Name: "barefasthttp", IdleTimeout: 5 * time.Minute, Concurrency: 1 << 18}
}

// benchEdgeChain is bench compare's edge (bench/env.go edgeBase with
// ScopeAll): the whole chain, sold_out before session, access, ip_limit and
// conn_limit on every path, limits that never refuse.
const benchEdgeChain = `
listen: {addr: "127.0.0.1:0"}
admin: {addr: "127.0.0.1:0"}
log: {access_sample: 0}
auth:
  secrets: ["%s"]
filters:
  - {type: access, scope: all, rules: ["allow all"]}
  - {type: ip_limit, scope: all, rate: 1000000r/s, burst: 1000000, nodelay: true}
  - {type: conn_limit, scope: all, max: 1000000}
  - {type: sale_window}
  - {type: sold_out}
  - {type: session}
  - {type: user_limit, limits: [{rate: 100000r/s, burst: 100000, nodelay: true}]}
  - {type: purchase_token}
upstreams:
  pools: [{name: origin, servers: ["%s"]}]
  routes: [{prefix: /, pool: origin}]
activities:
  - {product_id: p1, name: "Flash Sneaker", price: "99.00", stock: 100, limit: 1, start: "+0s", end: "+1h"}
`

// soldOutEdge starts an edge from cfg (a format taking the session secret
// and the origin's address) whose product p1 is sold out in Redis and in the
// edge's flag, and returns it with a session for alice.
func soldOutEdge(tb testing.TB, cfg string) (*edge, string) {
	tb.Helper()
	e := startEdge(tb, fmt.Sprintf(cfg, allocSecret, startOrigin(tb)))
	codec, err := session.NewCodec([][]byte{[]byte(allocSecret)}, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	jwt, _ := codec.Sign("alice", time.Now())
	// Sell out for real (in Redis), so the background refresh agrees with
	// the flag, and wait until the edge has seen it.
	c := redistest.Client(tb, e.srv.Store().Addr())
	if err := c.Do(tb.Context(), c.B().Set().Key(stock.StockKey("p1")).Value("0").Build()).Error(); err != nil {
		tb.Fatal(err)
	}
	if err := e.srv.Sale().Refresh(tb.Context(), false); err != nil {
		tb.Fatal(err)
	}
	if !e.srv.env.Sales.StateOf("p1").SoldOut() {
		tb.Fatal("refresh did not set the sold-out flag")
	}
	return e, jwt
}

// BenchmarkFastPathSoldOut: bench compare's soldout target, wrk's request
// (a sold-out purchase attempt with a session and a purchase token).
func BenchmarkFastPathSoldOut(b *testing.B) {
	e, jwt := soldOutEdge(b, benchEdgeChain)
	body := `{"productId":"p1","token":"` + strings.Repeat("t", 120) + `","quantity":1}`
	req := "POST /api/seckill/do HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\nAuthorization: Bearer " + jwt +
		"\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
	soldOut := []byte(`{"code":"SOLD_OUT","message":"sold out"}`)
	bare := barePeer(func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(fasthttp.StatusGone)
		ctx.Response.Header.SetContentType("application/json")
		ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
		ctx.SetBody(soldOut)
	})
	b.Run("server=edge", func(b *testing.B) { serveReplay(b, e.srv.public, req, "410") })
	b.Run("server=bare", func(b *testing.B) { serveReplay(b, bare, req, "410") })
}

// BenchmarkFastPathPage: bench compare's page target, wrk's GET of the sale
// page; the bare server answers the edge's own bytes and headers.
func BenchmarkFastPathPage(b *testing.B) {
	e, _ := soldOutEdge(b, benchEdgeChain)
	req := "GET /seckill/p1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
	bare := barePeer(pageHandler(e))
	b.Run("server=edge", func(b *testing.B) { serveReplay(b, e.srv.public, req, "200") })
	b.Run("server=bare", func(b *testing.B) { serveReplay(b, bare, req, "200") })
}

// pageHandler is a bare handler that answers the edge's sale page: its
// bytes and headers, taken apart once.
func pageHandler(e *edge) fasthttp.RequestHandler {
	var page fasthttp.Response
	ctx := requestCtx("GET", "/seckill/p1", "", "")
	e.srv.Handle(ctx)
	ctx.Response.CopyTo(&page)
	type kv struct{ k, v []byte }
	var hdrs []kv
	for k, v := range page.Header.All() {
		switch string(k) {
		case fasthttp.HeaderContentType, fasthttp.HeaderContentLength, fasthttp.HeaderServer, fasthttp.HeaderDate:
			continue
		}
		hdrs = append(hdrs, kv{append([]byte(nil), k...), append([]byte(nil), v...)})
	}
	ct := append([]byte(nil), page.Header.ContentType()...)
	pageBody := append([]byte(nil), page.Body()...)
	return func(ctx *fasthttp.RequestCtx) {
		for _, h := range hdrs {
			ctx.Response.Header.SetCanonical(h.k, h.v)
		}
		ctx.Response.Header.SetContentTypeBytes(ct)
		ctx.Response.SetBodyRaw(pageBody)
	}
}
