package proxy

import (
	"bufio"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// parsedCtx is a request as the edge server parses it off the wire (with
// its raw header block, which the origin pools scan once).
func parsedCtx(t *testing.T, raw string) *fasthttp.RequestCtx {
	t.Helper()
	req := new(fasthttp.Request)
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(req, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5555}, nil)
	return ctx
}

// TestProxiedPathAllocs drives Handle on the proxied path with what issue
// 25 and issue 29 added to it: a request forwarded with the client's trace
// continued, one whose malformed trace is replaced, and a cache hit keyed by
// every line of a header answered 304 to a conditional client. None may
// allocate.
func TestProxiedPathAllocs(t *testing.T) {
	// An origin that allocates nothing itself: AllocsPerRun counts every
	// goroutine of the process.
	page, etag := []byte("a page"), []byte(`"v1"`)
	origin := startQuietOrigin(t, func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.SetBytesV("ETag", etag)
		ctx.SetBody(page)
	})
	e := startEdge(t, cacheEdgeConfig(origin, `, key: [method, host, path, query, "header:Accept-Language"]`))
	const trace = "Traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nTracestate: a=1\r\n"
	for _, tc := range []struct {
		name, raw string
		status    int
	}{
		{"forwarded, trace continued", "GET /page HTTP/1.1\r\nHost: shop.example\r\n" + trace + "\r\n", 200},
		{"forwarded, trace replaced", "GET /page HTTP/1.1\r\nHost: shop.example\r\nTraceparent: 00-XYZ\r\n\r\n", 200},
		{"conditional hit", "GET /c/page HTTP/1.1\r\nHost: shop.example\r\nAccept-Language: de\r\nAccept-Language: en\r\n" +
			"If-None-Match: \"v1\"\r\n" + trace + "\r\n", 304},
	} {
		ctx := parsedCtx(t, tc.raw)
		for range 3 {
			ctx.Response.Reset()
			e.srv.Handle(ctx) // the miss, then warm pools
		}
		if got := ctx.Response.StatusCode(); got != tc.status {
			t.Fatalf("%s: status %d, want %d", tc.name, got, tc.status)
		}
		n := testing.AllocsPerRun(100, func() {
			ctx.Response.Reset()
			e.srv.Handle(ctx)
		})
		if n != 0 {
			t.Errorf("%s: %v allocations per request", tc.name, n)
		}
	}
}

// startQuietOrigin runs h as an origin on loopback until the test ends.
func startQuietOrigin(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fasthttp.Server{Handler: h}
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown() })
	return ln.Addr().String()
}
