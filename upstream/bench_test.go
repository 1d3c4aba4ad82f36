package upstream

import (
	"bufio"
	"flashgate/conf"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// serveCtx is a request as the edge server would hand it to Serve, parsed
// from the wire (so with its raw header block), reused across iterations the
// way fasthttp reuses its RequestCtx.
func serveCtx(path string) *fasthttp.RequestCtx {
	return serveCtxWith(path, "X-Forwarded-For: 198.51.100.1\r\n"+
		"Connection: keep-alive, X-Drop\r\n"+
		"X-Drop: 1\r\n")
}

// serveCtxWith is serveCtx with other headers than Host.
func serveCtxWith(path, headers string) *fasthttp.RequestCtx {
	req := new(fasthttp.Request)
	raw := "GET " + path + " HTTP/1.1\r\nHost: shop.example\r\n" + headers + "\r\n"
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		panic(err)
	}
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 40000}, nil)
	return ctx
}

func benchPool(t testing.TB, balance string) *Pool {
	m, _ := newTestManager(t)
	body := []byte(`{"ok":true}`)
	h := func(ctx *fasthttp.RequestCtx) { ctx.SetBody(body) }
	c := onePool("p", startOrigin(t, h), startOrigin(t, h))
	c.Pools[0].Balance = balance
	hooked := 0
	m.OnResponse = func(string, int, time.Duration) { hooked++ }
	return mustBuild(t, m, c).Pool("p")
}

func TestServeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	for _, balance := range []string{conf.RoundRobin, conf.LeastPending} {
		t.Run(balance, func(t *testing.T) {
			p := benchPool(t, balance)
			ctx := serveCtx("/api/items?id=1")
			serve := func() {
				p.Serve(ctx, testClientIP, nil)
				if ctx.Response.StatusCode() != 200 {
					t.Fatalf("status %d", ctx.Response.StatusCode())
				}
			}
			for range 10 {
				serve() // warm connections and pools
			}
			if n := testing.AllocsPerRun(200, serve); n != 0 {
				t.Fatalf("Serve allocates %v times per request", n)
			}
		})
	}
}

// TestServeFilteringAllocs: a request full of what Serve removes (names
// nginx drops, Proxy, the forwarding headers of an untrusted client) or
// keeps from a trusted proxy costs no allocation either.
func TestServeFilteringAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	p := benchPool(t, conf.RoundRobin)
	ctx := serveCtxWith("/api/items?id=1", "X_Real_IP: 6.6.6.6\r\nX.Real.IP: 6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\n"+
		"X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\n"+
		"Forwarded: for=6.6.6.6\r\nProxy: http://evil\r\nProxy-Foo: 1\r\nConnection: close, X-Drop\r\nX-Drop: 1\r\n")
	if requestPresent(&ctx.Request.Header, false)&hOddName == 0 {
		t.Fatal("the request has no odd name: the test would not drop any")
	}
	for _, tc := range []struct {
		name    string
		proxies TrustedProxies
	}{{"untrusted", nil}, {"trusted", trustedPeers(t)}} {
		t.Run(tc.name, func(t *testing.T) {
			serve := func() {
				p.Serve(ctx, testClientIP, tc.proxies)
				if ctx.Response.StatusCode() != 200 {
					t.Fatalf("status %d", ctx.Response.StatusCode())
				}
			}
			for range 10 {
				serve() // warm connections and pools
			}
			if n := testing.AllocsPerRun(200, serve); n != 0 {
				t.Fatalf("Serve allocates %v times per request", n)
			}
		})
	}
}

// BenchmarkServe is one proxied GET over loopback: Serve called on a
// RequestCtx, the origin a fasthttp server on 127.0.0.1.
func BenchmarkServe(b *testing.B) {
	for _, balance := range []string{conf.RoundRobin, conf.LeastPending} {
		b.Run(balance, func(b *testing.B) {
			p := benchPool(b, balance)
			ctx := serveCtx("/api/items?id=1")
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				p.Serve(ctx, testClientIP, nil)
			}
			// The process's CPU (the origin's included, the same in an
			// A/B): ns/op over loopback is mostly waiting, and noisy.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkEdgeGET adds the edge's own server and a client in front:
// client -> edge (Match + Serve) -> origin, all on loopback.
func BenchmarkEdgeGET(b *testing.B) {
	m, _ := newTestManager(b)
	c := onePool("p", idOrigin(b, "a"), idOrigin(b, "b"))
	e := startEdge(b, mustBuild(b, m, c))
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI("/api/items")
	req.Header.SetHost("shop.example")
	b.ReportAllocs()
	for b.Loop() {
		if err := e.c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			b.Fatal(err, resp.StatusCode())
		}
	}
}

// TestOnResponseTimesTheOrigin pins what the latency handed to OnResponse
// means: the wait for the origin, not the time since the request arrived
// (ctx.Time(), which would count the caller's filters and delays).
func TestOnResponseTimesTheOrigin(t *testing.T) {
	m, _ := newTestManager(t)
	const originDelay, callerDelay = 30 * time.Millisecond, 200 * time.Millisecond
	origin := startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		time.Sleep(originDelay)
		ctx.SetBodyString("ok")
	})
	var got time.Duration
	m.OnResponse = func(_ string, _ int, d time.Duration) { got = d }
	p := mustBuild(t, m, onePool("p", origin)).Pool("p")
	ctx := serveCtx("/x") // arrival: now
	time.Sleep(callerDelay)
	p.Serve(ctx, testClientIP, nil)
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("status %d", ctx.Response.StatusCode())
	}
	if got < originDelay || got >= callerDelay {
		t.Errorf("OnResponse got %v: want at least the origin's %v and less than the %v before Serve", got, originDelay, callerDelay)
	}
}

// BenchmarkPrepare is the request side of Serve without the network: the
// origin request built from a browser-like request (prepare) and written
// out as HostClient would (Request.Write to a discarding writer), so the
// edge's own per-request work is measured without loopback noise.
func BenchmarkPrepare(b *testing.B) {
	ctx := serveCtxWith("/items/p1", "User-Agent: Mozilla/5.0\r\nAccept: text/html\r\n"+
		"Accept-Language: en\r\nAccept-Encoding: gzip, br\r\nConnection: keep-alive\r\n"+
		"Cookie: sid=1\r\nX-Forwarded-For: 198.51.100.1\r\n")
	var out fasthttp.Request
	var buf []byte
	w := bufio.NewWriter(io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		var ok bool
		if buf, ok = prepare(&out, ctx, hop{clientIP: testClientIP}, buf); !ok {
			b.Fatal("refused")
		}
		if err := out.Write(w); err != nil {
			b.Fatal(err)
		}
		out.Reset()
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkConnDeadlines: what fasthttp's server does with a keep-alive
// connection's deadlines per request — the idle wait's read deadline, the
// read of the request (it came whole), the read deadline once it is in, the
// write deadline — on a real loopback socket, 64 connections as in bench
// compare's wrk rounds, bare and as LazyConn. The client's write of the
// request and the server's read are in both; the difference is what
// LazyConn saves per request.
//
//	go test -run '^$' -bench ConnDeadlines -count 6 ./upstream/ | benchstat -col /conn -
func BenchmarkConnDeadlines(b *testing.B) {
	const conns = 64
	var clients, raw []net.Conn
	for range conns {
		c, s := tcpPair(b)
		clients, raw = append(clients, c), append(raw, s)
	}
	const idle, read, write = 60 * time.Second, 5 * time.Second, 5 * time.Second
	for _, tc := range []struct {
		name string
		wrap func(net.Conn) net.Conn
	}{
		{"bare", func(c net.Conn) net.Conn { return c }},
		{"lazy", NewLazyConn},
	} {
		b.Run("conn="+tc.name, func(b *testing.B) {
			cs := make([]net.Conn, conns)
			for i, c := range raw {
				cs[i] = tc.wrap(c)
			}
			req, buf := []byte("r"), make([]byte, 1)
			b.ReportAllocs()
			cpu0 := processCPU()
			defer func() { b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op") }()
			for i := 0; b.Loop(); i++ {
				c := cs[i%conns]
				if _, err := clients[i%conns].Write(req); err != nil {
					b.Fatal(err)
				}
				c.SetReadDeadline(time.Now().Add(idle))
				if _, err := c.Read(buf); err != nil {
					b.Fatal(err)
				}
				c.SetReadDeadline(time.Now().Add(read))
				c.SetWriteDeadline(time.Now().Add(write))
			}
		})
	}
}
