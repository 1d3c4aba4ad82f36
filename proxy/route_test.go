package proxy

import (
	"fmt"
	"strings"
	"testing"
)

// TestSaleRoutes: what the router makes of a path. The page is served only
// for /seckill/{valid product id}, an asset only under /seckill/_static/
// with a name; anything deeper or malformed under /seckill/ is 404, and
// only paths outside the sale's prefixes reach the origin.
func TestSaleRoutes(t *testing.T) {
	origin := startOrigin(t)
	e := startEdge(t, fmt.Sprintf(baseConfig, "100000r/s", 100000, origin))
	for _, tc := range []struct{ path, want string }{
		{"/seckill/p1", "page"},
		{"/seckill/sku-2024_red", "page"},
		{"/seckill/_static/app.js", "asset"},
		{"/seckill/_static/", "404"},
		{"/seckill/_static", "404"}, // "_static" is not a product id
		{"/seckill/", "404"},
		{"/seckill/p1/", "404"},
		{"/seckill/p1/x", "404"},
		{"/seckill/-p", "404"},
		{"/api/seckill/status", "api"},
		{"/seckill", "origin"},
		{"/", "origin"},
	} {
		ctx := requestCtx("GET", tc.path, "", "")
		e.srv.Handle(ctx)
		ct := string(ctx.Response.Header.ContentType())
		got := "asset"
		switch {
		case ctx.Response.StatusCode() == 404 && string(ctx.Response.Header.Peek("X-Origin")) == "":
			got = "404"
		case string(ctx.Response.Header.Peek("X-Origin")) == "yes":
			got = "origin"
		case strings.HasPrefix(ct, "text/html"):
			got = "page"
		case strings.HasPrefix(ct, "application/json"):
			got = "api"
		}
		if got != tc.want {
			t.Errorf("GET %s: %s (status %d, %s), want %s", tc.path, got, ctx.Response.StatusCode(), ct, tc.want)
		}
	}
}

func TestClassifyAllocs(t *testing.T) {
	p, q := []byte("/seckill/_static/app.js"), []byte("/seckill/sku-1")
	if n := testing.AllocsPerRun(100, func() { classify(p); classify(q) }); n != 0 {
		t.Fatalf("classify allocates %v times", n)
	}
}
