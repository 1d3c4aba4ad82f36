package proxy

import (
	"net"
	"testing"

	"github.com/valyala/fasthttp"
)

const allocSecret = "0123456789abcdef0123456789abcdef-session"

// requestCtx builds a request as fasthttp would hand it to Handle.
func requestCtx(method, uri, body, bearer string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	if body != "" {
		req.SetBodyString(body)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5555}, nil)
	return ctx
}

// allocEdgeChain is an edge running every shopper filter (the secret and
// the origin go in its two %s).
const allocEdgeChain = `
listen: {addr: "127.0.0.1:0"}
admin: {addr: "127.0.0.1:0"}
log: {access_sample: 0}
auth:
  secrets: ["%s"]
filters:
  - {type: access, scope: all, rules: ["allow all"]}
  - {type: ip_limit, rate: 100000r/s, burst: 100000, nodelay: true}
  - {type: conn_limit, max: 100}
  - {type: session}
  - {type: sale_window}
  - {type: sold_out}
  - {type: user_limit, limits: [{rate: 100000r/s, burst: 100000, nodelay: true}]}
  - {type: purchase_token}
upstreams:
  pools: [{name: origin, servers: ["%s"]}]
  routes: [{prefix: /, pool: origin}]
activities:
  - {product_id: p1, name: "Flash Sneaker", price: "99.00", stock: 100, limit: 1, start: "+0s", end: "+1h"}
`

// TestHotPathsAllocs drives Handle directly: the status poll and a
// purchase attempt for a sold-out product (the two answers a flash sale
// gives millions of times) must not allocate.
func TestHotPathsAllocs(t *testing.T) {
	e, jwt := soldOutEdge(t, allocEdgeChain)

	cases := []struct{ name, method, uri, body string }{
		{"status", "GET", "/api/seckill/status?productId=p1", ""},
		{"sold-out do", "POST", "/api/seckill/do", `{"productId":"p1","token":"x","quantity":1}`},
		{"sold-out token", "POST", "/api/seckill/token", `{"productId":"p1"}`},
	}
	for _, c := range cases {
		ctx := requestCtx(c.method, c.uri, c.body, jwt)
		e.srv.Handle(ctx) // warm pools
		want := 200
		if c.name != "status" {
			want = 410
		}
		if got := ctx.Response.StatusCode(); got != want {
			t.Fatalf("%s: status %d %s", c.name, got, ctx.Response.Body())
		}
		n := testing.AllocsPerRun(200, func() {
			ctx.Response.Reset()
			e.srv.Handle(ctx)
		})
		if n != 0 {
			t.Errorf("%s: %v allocations per request", c.name, n)
		}
	}
	// The purchase calls went through flashgate_sale_do_duration_seconds,
	// and only they did.
	if got := e.srv.m.charts.latency().Count(); got != 202 {
		t.Errorf("do latency observed %d times, want 202 (the sold-out do calls: ours, AllocsPerRun's warm-up and its 200)", got)
	}
}
