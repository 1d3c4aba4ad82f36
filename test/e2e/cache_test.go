package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
)

// cacheBurst is how many shoppers ask for one new key at once.
const cacheBurst = 2000

// cacheOrigin is the origin behind the cached route: a real HTTP server on
// loopback that counts the requests it sees, per path. It holds a request
// for /products/burst until hold is closed, and answers /products/short
// with max-age=1, so that its copy goes stale within the test.
type cacheOrigin struct {
	srv      *fasthttp.Server
	addr     string
	hold     chan struct{}
	holdOnce sync.Once
	stopOnce sync.Once
	stopped  chan struct{}
	mu       sync.Mutex
	paths    map[string]int
	total    atomic.Int64
}

func startCacheOrigin(t *testing.T) *cacheOrigin {
	t.Helper()
	o := &cacheOrigin{hold: make(chan struct{}), stopped: make(chan struct{}), paths: map[string]int{}}
	o.srv = &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		path := string(ctx.Path())
		o.mu.Lock()
		o.paths[path]++
		o.mu.Unlock()
		o.total.Add(1)
		if path == "/products/burst" {
			<-o.hold
		}
		if path == "/products/short" {
			ctx.Response.Header.Set("Cache-Control", "max-age=1")
		}
		ctx.SetContentType("text/plain")
		ctx.SetBodyString("page " + path)
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.addr = ln.Addr().String()
	go func() { defer close(o.stopped); _ = o.srv.Serve(ln) }()
	t.Cleanup(o.stop)
	return o
}

// release lets the held request go.
func (o *cacheOrigin) release() { o.holdOnce.Do(func() { close(o.hold) }) }

// stop closes the listener and the idle connections: the edge's next
// connection to the origin is refused.
func (o *cacheOrigin) stop() {
	o.release()
	o.stopOnce.Do(func() {
		_ = o.srv.Shutdown()
		<-o.stopped
	})
}

func (o *cacheOrigin) seen(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.paths[path]
}

// cacheAnswer is one answer through the edge.
type cacheAnswer struct {
	status  int
	body    string
	xCache  string
	age     string
	hasAge  bool
	failure error
}

// cacheShopper sends requests through the edge and tallies the X-Cache of
// every answer, which the edge's metrics must match.
type cacheShopper struct {
	c     *fasthttp.HostClient
	mu    sync.Mutex
	tally map[string]int
}

func (s *cacheShopper) do(method, path string) cacheAnswer {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	req.Header.SetHost("shop.example")
	if method == "POST" {
		req.SetBodyString("{}")
	}
	if err := s.c.DoTimeout(req, resp, 60*time.Second); err != nil {
		return cacheAnswer{failure: err}
	}
	a := cacheAnswer{status: resp.StatusCode(), body: string(resp.Body()), xCache: string(resp.Header.Peek("X-Cache"))}
	if v := resp.Header.Peek("Age"); v != nil {
		a.age, a.hasAge = string(v), true
	}
	s.mu.Lock()
	s.tally[a.xCache]++
	s.mu.Unlock()
	return a
}

func (s *cacheShopper) get(t *testing.T, path string) cacheAnswer {
	t.Helper()
	a := s.do("GET", path)
	if a.failure != nil {
		t.Fatalf("GET %s: %v", path, a.failure)
	}
	return a
}

// scrapeMetrics reads an admin listener's /metrics into series -> value.
func scrapeMetrics(t *testing.T, admin string) map[string]float64 {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	res, err := c.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("metrics: %d %s", res.StatusCode, b)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// TestCacheThroughTheBinary: a route with cache: in a real edge.yaml, the
// real proxy binary in front of a real origin. The first request is a MISS,
// the next a HIT with Age; 2,000 shoppers at once on a new key cost the
// origin one request and all get it; with the origin stopped, answers past
// the TTL are the stale 200s within stale_if_error, never a 5xx; and the
// admin /metrics count exactly what the shoppers saw.
func TestCacheThroughTheBinary(t *testing.T) {
	bin := buildProxy(t)
	r := redistest.New(t)
	origin := startCacheOrigin(t)
	admin := ordFreePort(t)
	const route = `route="/products/"`
	cfg := fmt.Sprintf(`
admin: {addr: %q}
upstreams:
  pools:
    - name: origin
      servers: [%q]
      read_timeout: 60s
  routes:
    - prefix: /products/
      pool: origin
      cache:
        ttl: 30s
        stale_if_error: 1m
        lock_timeout: 60s
`, admin, origin.addr)
	p := startProcess(t, bin, r.Addr(), cfg)
	shop := &cacheShopper{
		c:     &fasthttp.HostClient{Addr: p.addr, MaxConns: 2 * cacheBurst, ReadTimeout: 60 * time.Second, MaxIdemponentCallAttempts: 1},
		tally: map[string]int{},
	}
	t.Cleanup(shop.c.CloseIdleConnections)

	t.Run("miss then hit with Age", func(t *testing.T) {
		if a := shop.get(t, "/products/a"); a.status != 200 || a.body != "page /products/a" || a.xCache != "MISS" {
			t.Fatalf("first: %d %q X-Cache %q, want 200 MISS", a.status, a.body, a.xCache)
		}
		a := shop.get(t, "/products/a")
		if a.status != 200 || a.body != "page /products/a" || a.xCache != "HIT" {
			t.Fatalf("second: %d %q X-Cache %q, want 200 HIT", a.status, a.body, a.xCache)
		}
		if age, err := strconv.Atoi(a.age); !a.hasAge || err != nil || age < 0 || age > 30 {
			t.Fatalf("the hit's Age %q (present %v), want seconds within the TTL", a.age, a.hasAge)
		}
		if n := origin.seen("/products/a"); n != 1 {
			t.Fatalf("the origin saw /products/a %d times, want 1", n)
		}
	})

	t.Run("a bypassing request is not the cache's", func(t *testing.T) {
		if a := shop.do("POST", "/products/a"); a.failure != nil || a.status != 200 || a.xCache != "BYPASS" {
			t.Fatalf("POST: %v %d X-Cache %q, want 200 BYPASS", a.failure, a.status, a.xCache)
		}
	})

	t.Run("2,000 shoppers on a new key: one origin request", func(t *testing.T) {
		answers := make(chan cacheAnswer, cacheBurst)
		for range cacheBurst {
			go func() { answers <- shop.do("GET", "/products/burst") }()
		}
		// The origin holds the first request; every shopper is inside the
		// edge (the leader at the origin, the others waiting for it) before
		// it answers.
		await.Until(t, 60*time.Second, "the burst inside the edge", func() bool {
			return scrapeMetrics(t, admin)["flashgate_http_requests_in_flight"] >= cacheBurst
		})
		origin.release()
		xc := map[string]int{}
		for range cacheBurst {
			a := <-answers
			if a.failure != nil || a.status != 200 || a.body != "page /products/burst" {
				t.Fatalf("a shopper got %v %d %q", a.failure, a.status, a.body)
			}
			xc[a.xCache]++
		}
		if n := origin.seen("/products/burst"); n != 1 {
			t.Fatalf("the origin saw %d requests for the burst's key, want 1", n)
		}
		if xc["MISS"] != 1 || xc["HIT"] != cacheBurst-1 {
			t.Fatalf("the burst's X-Cache: %v, want 1 MISS and %d HIT", xc, cacheBurst-1)
		}
	})

	// Before the origin goes: every request the cache made reached it.
	if a := shop.get(t, "/products/short"); a.status != 200 || a.xCache != "MISS" {
		t.Fatalf("/products/short: %d X-Cache %q, want 200 MISS", a.status, a.xCache)
	}
	before := scrapeMetrics(t, admin)
	if got, want := before["flashgate_cache_origin_requests_total{"+route+"}"], 3.0; got != want {
		t.Fatalf("flashgate_cache_origin_requests_total = %v, want %v (a, burst, short)", got, want)
	}
	if n := origin.total.Load(); n != 4 {
		t.Fatalf("the origin saw %d requests, want 4 (the cache's 3 and the POST)", n)
	}

	var stale int
	t.Run("origin stopped: stale 200s within stale_if_error", func(t *testing.T) {
		origin.stop()
		// /products/short is fresh for 1 s (its max-age), then stale.
		await.Until(t, 10*time.Second, "/products/short stale", func() bool {
			a := shop.get(t, "/products/short")
			if a.status != 200 || (a.xCache != "HIT" && a.xCache != "STALE") {
				t.Fatalf("origin down: %d X-Cache %q, want 200 HIT or STALE", a.status, a.xCache)
			}
			return a.xCache == "STALE"
		})
		const n = 200
		answers := make(chan cacheAnswer, n)
		for range n {
			go func() { answers <- shop.do("GET", "/products/short") }()
		}
		for range n {
			a := <-answers
			if a.failure != nil || a.status != 200 || a.body != "page /products/short" || a.xCache != "STALE" {
				t.Fatalf("origin down: %v %d %q X-Cache %q, want the stale 200", a.failure, a.status, a.body, a.xCache)
			}
			if age, err := strconv.Atoi(a.age); err != nil || age < 1 {
				t.Fatalf("a stale answer's Age %q, want at least its max-age (1)", a.age)
			}
		}
		if a := shop.get(t, "/products/never-cached"); a.status != 502 || a.xCache != "MISS" {
			t.Fatalf("a key never cached, origin down: %d X-Cache %q, want 502 MISS", a.status, a.xCache)
		}
		shop.mu.Lock()
		stale = shop.tally["STALE"]
		shop.mu.Unlock()
	})

	t.Run("the admin metrics count it", func(t *testing.T) {
		m := scrapeMetrics(t, admin)
		for _, res := range []string{"hit", "miss", "stale", "updating", "bypass"} {
			series := "flashgate_cache_requests_total{" + route + `,result="` + res + `"}`
			if got, want := m[series], float64(shop.tally[strings.ToUpper(res)]); got != want {
				t.Errorf("%s = %v, the shoppers saw %v", series, got, want)
			}
		}
		// While the origin was down every flight asked it once and failed:
		// at least one, at most one per stale answer, plus the never-cached
		// key.
		down := m["flashgate_cache_origin_requests_total{"+route+"}"] - 3
		if down < 2 || down > float64(stale)+1 {
			t.Errorf("origin requests while it was down: %v, want 2..%d", down, stale+1)
		}
		// The POST the origin accepted dropped /products/a (RFC 9111 §4.4).
		if got := m["flashgate_cache_entries{"+route+"}"]; got != 2 {
			t.Errorf("flashgate_cache_entries = %v, want 2 (burst, short; a dropped by the POST, the 502 not stored)", got)
		}
		if got := m["flashgate_cache_invalidated_total{"+route+"}"]; got != 1 {
			t.Errorf("flashgate_cache_invalidated_total = %v, want 1 (a, by the POST)", got)
		}
		maxBytes := m["flashgate_cache_max_bytes{"+route+"}"]
		if got := m["flashgate_cache_bytes{"+route+"}"]; got <= 0 || got > maxBytes || maxBytes != 64<<20 {
			t.Errorf("flashgate_cache_bytes = %v of %v, want in (0, 64 MiB]", got, maxBytes)
		}
		for _, series := range []string{"flashgate_cache_evictions_total{" + route + "}", "flashgate_cache_rejected_total{" + route + "}"} {
			if got, ok := m[series]; !ok || got != 0 {
				t.Errorf("%s = %v (present %v), want 0", series, got, ok)
			}
		}
		t.Logf("shoppers saw %v; origin requests %v", shop.tally, m["flashgate_cache_origin_requests_total{"+route+"}"])
	})
}
