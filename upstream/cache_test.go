package upstream

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/conf"
	"flashgate/internal/await"
)

// cacheClock is the caches' freshness clock in these tests: frozen unless
// advanced, so "within the TTL" does not depend on how fast the machine is.
type cacheClock struct{ ns atomic.Int64 }

func (c *cacheClock) now() int64              { return c.ns.Load() }
func (c *cacheClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// cachedRoute builds one pool of the given servers with a cached route "/"
// and an edge in front that serves through Set.Route, as the proxy does.
func cachedRoute(t testing.TB, cc conf.CacheConfig, servers ...string) (*edge, *cacheClock, *Manager) {
	t.Helper()
	m, _ := newTestManager(t)
	clock := &cacheClock{}
	clock.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	m.cacheNow = clock.now
	c := onePool("p", servers...)
	c.Pools[0].ReadTimeout = 2 * time.Second
	c.Routes[0].Cache = &cc
	return startRouteEdge(t, mustBuild(t, m, c)), clock, m
}

// startRouteEdge is startEdge with Set.Route instead of Match.
func startRouteEdge(t testing.TB, s *Set) *edge {
	t.Helper()
	e := &edge{}
	e.set.Store(s)
	e.addr = startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		r := e.set.Load().Route(ctx.Host(), ctx.Path())
		if r == nil {
			ctx.SetStatusCode(fasthttp.StatusNotFound)
			return
		}
		r.Serve(ctx, testClientIP, nil)
	})
	e.c = &fasthttp.HostClient{Addr: e.addr, MaxIdemponentCallAttempts: 1}
	return e
}

// countingOrigin answers with the number of requests it has seen ("1",
// "2", ...), after calling before (if set) with the request.
func countingOrigin(t testing.TB, before func(n int64, ctx *fasthttp.RequestCtx)) (string, *atomic.Int64) {
	var n atomic.Int64
	addr := startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		k := n.Add(1)
		if before != nil {
			before(k, ctx)
		}
		if len(ctx.Response.Body()) == 0 {
			ctx.SetBodyString(strconv.FormatInt(k, 10))
		}
	})
	return addr, &n
}

// get sends GET host/path with the headers (name, value pairs) through e.
func (e *edge) get(t testing.TB, path string, headers ...string) (int, string, string) {
	t.Helper()
	status, body, xc, _ := e.getAge(t, path, headers...)
	return status, body, xc
}

// getAge is get with the answer's Age (-1 when absent).
func (e *edge) getAge(t testing.TB, path string, headers ...string) (int, string, string, int) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(path)
	req.Header.SetHost("shop.example")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if err := e.c.DoTimeout(req, resp, 10*time.Second); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	age := -1
	if v := resp.Header.Peek("Age"); v != nil {
		age, _ = strconv.Atoi(string(v))
	}
	return resp.StatusCode(), string(resp.Body()), string(resp.Header.Peek("X-Cache")), age
}

// burstEnv hands TestCacheBurstClient the edge's address and the body
// every answer must carry.
const burstEnv = "FLASHGATE_CACHE_BURST"

// TestCacheBurstOneOriginRequestPerTTL: 10,000 clients, each on its own
// loopback connection, ask for one key at once; the origin holds the first
// request until all 10,000 are inside the edge. Exactly one request reaches
// the origin per TTL, and every client gets its answer. The clients run in
// a child process (this test binary, TestCacheBurstClient): both ends of
// 10,000 connections do not fit one process's open-file limit here.
func TestCacheBurstOneOriginRequestPerTTL(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 connections")
	}
	if raceEnabled {
		t.Skip("the race detector allows 8128 goroutines at a time; the edge needs 10,000 (the other cache tests cover the races)")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Max < burstClients+1000 {
		t.Skipf("the open-file limit (%d) is below one end of %d connections", lim.Max, burstClients)
	}
	var inEdge atomic.Int64
	release := make(chan struct{})
	var releaseOnce sync.Once
	origin, hits := countingOrigin(t, func(int64, *fasthttp.RequestCtx) { <-release })
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })

	m, _ := newTestManager(t)
	clock := &cacheClock{}
	clock.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	m.cacheNow = clock.now
	c := onePool("p", origin)
	// A TTL of minutes on the frozen test clock: ristretto expires what it
	// holds on the wall clock, which must not do it within the test.
	c.Routes[0].Cache = &conf.CacheConfig{TTL: 10 * time.Minute, LockTimeout: time.Minute}
	s := mustBuild(t, m, c)
	edgeAddr := startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		inEdge.Add(1)
		s.Route(ctx.Host(), ctx.Path()).Serve(ctx, testClientIP, nil)
	})

	burst := func(round int, want string) {
		inEdge.Store(0)
		cmd := exec.Command(os.Args[0], "-test.run=^TestCacheBurstClient$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), burstEnv+"="+edgeAddr+" "+want)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if round == 1 {
			await.Until(t, 2*time.Minute, "all clients inside the edge", func() bool { return inEdge.Load() >= burstClients })
			releaseOnce.Do(func() { close(release) })
		}
		err := cmd.Wait()
		if err != nil || !bytes.Contains(out.Bytes(), []byte("--- PASS: TestCacheBurstClient")) {
			t.Fatalf("round %d: the clients: %v\n%s", round, err, out.Bytes())
		}
		if got := hits.Load(); got != int64(round) {
			t.Fatalf("round %d: the origin saw %d requests, want %d (one per TTL)", round, got, round)
		}
	}
	burst(1, "1")
	clock.advance(10 * time.Minute) // the answer's TTL is over: one more origin request
	burst(2, "2")
}

const burstClients = 10_000

// TestCacheBurstClient is the clients' half of
// TestCacheBurstOneOriginRequestPerTTL, run by it in a child process.
func TestCacheBurstClient(t *testing.T) {
	arg := os.Getenv(burstEnv)
	if arg == "" {
		t.Skip("the clients of TestCacheBurstOneOriginRequestPerTTL, run by it")
	}
	addr, want, _ := strings.Cut(arg, " ")
	client := &fasthttp.HostClient{Addr: addr, MaxConns: burstClients, MaxIdemponentCallAttempts: 1,
		MaxConnWaitTimeout: time.Minute, ReadTimeout: 2 * time.Minute}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	var bad atomic.Int64
	var firstBad atomic.Value
	for range burstClients {
		wg.Go(func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("/product/1")
			req.Header.SetHost("shop.example")
			err := client.Do(req, resp)
			if err != nil || resp.StatusCode() != 200 || string(resp.Body()) != want {
				if bad.Add(1) == 1 {
					firstBad.Store(strconv.Itoa(resp.StatusCode()) + " " + string(resp.Body()) + " " + errString(err))
				}
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d of %d answers were not 200 %q; first: %v", n, burstClients, want, firstBad.Load())
	}
}

func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestCacheStaleIfError: with the origin refusing connections, answering
// 500 or timing out, answers within stale_if_error come from the stale copy
// (200, X-Cache STALE), never a 5xx, also for a burst; after the window the
// failure shows.
func TestCacheStaleIfError(t *testing.T) {
	var mode atomic.Value // "ok", "500", "slow"
	mode.Store("ok")
	origin := startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		switch mode.Load() {
		case "500":
			ctx.SetStatusCode(500)
			ctx.SetBodyString("origin broke")
		case "slow":
			time.Sleep(3 * time.Second) // past the pool's 2 s read timeout
			ctx.SetBodyString("late")
		default:
			ctx.SetBodyString("v1")
		}
	})
	e, clock, _ := cachedRoute(t, conf.CacheConfig{TTL: 10 * time.Second, StaleIfError: time.Minute}, origin)
	if code, body, xc := e.get(t, "/p"); code != 200 || body != "v1" || xc != "MISS" {
		t.Fatalf("first: %d %q %s", code, body, xc)
	}
	if code, body, xc := e.get(t, "/p"); code != 200 || body != "v1" || xc != "HIT" {
		t.Fatalf("second: %d %q %s", code, body, xc)
	}
	clock.advance(11 * time.Second)
	for _, m := range []string{"500", "slow"} {
		t.Run("origin "+m, func(t *testing.T) {
			mode.Store(m)
			if code, body, xc := e.get(t, "/p"); code != 200 || body != "v1" || xc != "STALE" {
				t.Fatalf("got %d %q %s, want 200 v1 STALE", code, body, xc)
			}
		})
	}
	mode.Store("500")
	t.Run("a burst while the origin fails", func(t *testing.T) {
		var wg sync.WaitGroup
		var bad atomic.Int64
		for range 200 {
			wg.Go(func() {
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				req.SetRequestURI("/p")
				req.Header.SetHost("shop.example")
				if err := e.c.DoTimeout(req, resp, 10*time.Second); err != nil || resp.StatusCode() != 200 || string(resp.Body()) != "v1" {
					bad.Add(1)
				}
			})
		}
		wg.Wait()
		if n := bad.Load(); n > 0 {
			t.Fatalf("%d of 200 were not the stale 200", n)
		}
	})
	t.Run("past the window the failure shows", func(t *testing.T) {
		clock.advance(time.Minute)
		if code, _, _ := e.get(t, "/p"); code != 500 {
			t.Fatalf("got %d, want the origin's 500", code)
		}
	})
}

// TestCacheStaleWhenOriginDown: connection refused is an error too.
func TestCacheStaleWhenOriginDown(t *testing.T) {
	m, _ := newTestManager(t)
	clock := &cacheClock{}
	clock.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	m.cacheNow = clock.now
	originSrv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("v1") }}
	ln := listenLoopback(t)
	go func() { _ = originSrv.Serve(ln) }()
	c := onePool("p", ln.Addr().String())
	c.Routes[0].Cache = &conf.CacheConfig{TTL: time.Second, StaleIfError: 30 * time.Second}
	e := startRouteEdge(t, mustBuild(t, m, c))
	if code, body, _ := e.get(t, "/p"); code != 200 || body != "v1" {
		t.Fatalf("first: %d %q", code, body)
	}
	if err := originSrv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	clock.advance(2 * time.Second)
	for i := range 5 {
		if code, body, xc := e.get(t, "/p"); code != 200 || body != "v1" || xc != "STALE" {
			t.Fatalf("request %d with the origin down: %d %q %s, want 200 v1 STALE", i, code, body, xc)
		}
	}
	clock.advance(30 * time.Second)
	if code, _, _ := e.get(t, "/p"); code != 502 {
		t.Fatalf("past stale_if_error: %d, want 502", code)
	}
}

// TestCacheStaleWhileRevalidate: past the TTL, within the window, the stale
// answer comes at once (UPDATING) and one background request renews it.
func TestCacheStaleWhileRevalidate(t *testing.T) {
	origin, n := countingOrigin(t, nil)
	e, clock, _ := cachedRoute(t, conf.CacheConfig{TTL: time.Second, StaleWhileRevalidate: time.Minute}, origin)
	if _, body, _ := e.get(t, "/p"); body != "1" {
		t.Fatalf("first: %q", body)
	}
	clock.advance(2 * time.Second)
	for range 20 {
		if code, body, xc := e.get(t, "/p"); code != 200 || (xc == "UPDATING") != (body == "1") {
			t.Fatalf("stale window: %d %q %s", code, body, xc)
		}
	}
	await.Until(t, 5*time.Second, "the renewed answer", func() bool {
		_, body, xc := e.get(t, "/p")
		return body == "2" && xc == "HIT"
	})
	if got := n.Load(); got != 2 {
		t.Fatalf("the origin saw %d requests, want 2 (one refresh)", got)
	}
}

// TestCacheRules: what the origin's headers and the request allow.
func TestCacheRules(t *testing.T) {
	origin, _ := countingOrigin(t, func(_ int64, ctx *fasthttp.RequestCtx) {
		q := ctx.QueryArgs()
		if v := q.Peek("cc"); len(v) > 0 {
			ctx.Response.Header.Set("Cache-Control", string(v))
		}
		if len(q.Peek("cookie")) > 0 {
			ctx.Response.Header.Set("Set-Cookie", "sid=1")
		}
		if v := q.Peek("vary"); len(v) > 0 {
			ctx.Response.Header.Set("Vary", string(v))
		}
		if v := q.Peek("status"); len(v) > 0 {
			code, _ := strconv.Atoi(string(v))
			ctx.SetStatusCode(code)
			ctx.Response.Header.Set("Location", "/elsewhere")
		}
	})
	e, clock, _ := cachedRoute(t, conf.CacheConfig{TTL: time.Minute, StaleIfError: time.Minute}, origin)
	stored := func(t *testing.T, path string, headers ...string) {
		t.Helper()
		_, a, _ := e.get(t, path, headers...)
		if _, b, xc := e.get(t, path, headers...); a != b || xc != "HIT" {
			t.Fatalf("%s: answers %q then %q, X-Cache %s: want the second from the cache", path, a, b, xc)
		}
	}
	notStored := func(t *testing.T, path string, headers ...string) {
		t.Helper()
		_, a, _ := e.get(t, path, headers...)
		if _, b, xc := e.get(t, path, headers...); a == b || xc == "HIT" {
			t.Fatalf("%s: answers %q then %q, X-Cache %s: want both from the origin", path, a, b, xc)
		}
	}
	t.Run("plain 200 stored", func(t *testing.T) { stored(t, "/a") })
	t.Run("query is part of the key", func(t *testing.T) {
		_, a, _ := e.get(t, "/q?x=1")
		_, b, _ := e.get(t, "/q?x=2")
		if a == b {
			t.Fatalf("two queries got one answer %q", a)
		}
	})
	t.Run("public max-age stored", func(t *testing.T) { stored(t, "/b?cc=public,max-age=30") })
	for _, cc := range []string{"no-store", "no-cache", "private", "private,max-age=60", "max-age=0", "s-maxage=0,max-age=60"} {
		t.Run("Cache-Control "+cc+" not stored", func(t *testing.T) { notStored(t, "/c?cc="+cc) })
	}
	t.Run("Set-Cookie not stored", func(t *testing.T) { notStored(t, "/d?cookie=1") })
	t.Run("Vary * not stored", func(t *testing.T) { notStored(t, "/e?vary=*") })
	t.Run("302 not stored", func(t *testing.T) { notStored(t, "/f?status=302") })
	t.Run("301 stored", func(t *testing.T) { stored(t, "/f?status=301") })
	t.Run("404 stored", func(t *testing.T) { stored(t, "/f?status=404") })
	t.Run("Authorization bypasses", func(t *testing.T) {
		notStored(t, "/g", "Authorization", "Bearer x")
		if _, _, xc := e.get(t, "/g", "Authorization", "Bearer x"); xc != "BYPASS" {
			t.Fatalf("X-Cache %s, want BYPASS", xc)
		}
	})
	t.Run("Range bypasses", func(t *testing.T) { notStored(t, "/h", "Range", "bytes=0-1") })
	t.Run("Vary keys by the listed header", func(t *testing.T) {
		stored(t, "/v?vary=Accept-Language", "Accept-Language", "de")
		_, de, _ := e.get(t, "/v?vary=Accept-Language", "Accept-Language", "de")
		_, fr, _ := e.get(t, "/v?vary=Accept-Language", "Accept-Language", "fr")
		_, fr2, xc := e.get(t, "/v?vary=Accept-Language", "Accept-Language", "fr")
		if de == fr || fr != fr2 || xc != "HIT" {
			t.Fatalf("de %q, fr %q then %q (%s): want two variants, each stored", de, fr, fr2, xc)
		}
	})
	t.Run("max-age shortens the ttl", func(t *testing.T) {
		stored(t, "/i?cc=max-age=5")
		clock.advance(6 * time.Second)
		if _, _, xc := e.get(t, "/i?cc=max-age=5"); xc != "MISS" {
			t.Fatalf("after max-age: X-Cache %s, want MISS", xc)
		}
	})
	t.Run("HEAD answered from the GET", func(t *testing.T) {
		stored(t, "/j")
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.Header.SetMethod("HEAD")
		req.SetRequestURI("/j")
		req.Header.SetHost("shop.example")
		resp.SkipBody = true
		if err := e.c.DoTimeout(req, resp, 5*time.Second); err != nil || string(resp.Header.Peek("X-Cache")) != "HIT" {
			t.Fatalf("HEAD: %v, X-Cache %q", err, resp.Header.Peek("X-Cache"))
		}
	})
	t.Run("Age counts from storing", func(t *testing.T) {
		stored(t, "/k")
		clock.advance(7 * time.Second)
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("/k")
		req.Header.SetHost("shop.example")
		if err := e.c.DoTimeout(req, resp, 5*time.Second); err != nil || string(resp.Header.Peek("Age")) != "7" {
			t.Fatalf("Age %q, want 7 (%v)", resp.Header.Peek("Age"), err)
		}
	})
}

// TestCacheMustRevalidateNoStale: must-revalidate forbids stale answers.
func TestCacheMustRevalidateNoStale(t *testing.T) {
	var fail atomic.Bool
	origin := startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		if fail.Load() {
			ctx.SetStatusCode(503)
			return
		}
		ctx.Response.Header.Set("Cache-Control", "max-age=10, must-revalidate")
		ctx.SetBodyString("v1")
	})
	e, clock, _ := cachedRoute(t, conf.CacheConfig{TTL: time.Minute, StaleIfError: time.Minute}, origin)
	e.get(t, "/p")
	fail.Store(true)
	clock.advance(11 * time.Second)
	if code, _, _ := e.get(t, "/p"); code != 503 {
		t.Fatalf("got %d, want the origin's 503", code)
	}
}

// TestCacheReloadKeepsAnswers: an equal config on reload keeps the cache;
// a changed one starts empty.
func TestCacheReloadKeepsAnswers(t *testing.T) {
	origin, _ := countingOrigin(t, nil)
	m, _ := newTestManager(t)
	clock := &cacheClock{}
	m.cacheNow = clock.now
	c := onePool("p", origin)
	c.Routes[0].Cache = &conf.CacheConfig{TTL: time.Minute}
	e := startRouteEdge(t, mustBuild(t, m, c))
	if _, body, _ := e.get(t, "/p"); body != "1" {
		t.Fatalf("first %q", body)
	}
	e.set.Store(mustBuild(t, m, c))
	if _, body, xc := e.get(t, "/p"); body != "1" || xc != "HIT" {
		t.Fatalf("after an equal reload: %q %s, want the stored 1", body, xc)
	}
	c.Routes[0].Cache = &conf.CacheConfig{TTL: 2 * time.Minute}
	e.set.Store(mustBuild(t, m, c))
	if _, body, _ := e.get(t, "/p"); body != "2" {
		t.Fatalf("after a changed reload: %q, want a new answer", body)
	}
}

// TestCacheHitAllocs: a hit allocates nothing (the stored header copied into
// the response's buffers, the body set without a copy).
func TestCacheHitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	for _, vary := range []bool{false, true} {
		t.Run("vary="+strconv.FormatBool(vary), func(t *testing.T) {
			r, ctx := hitRoute(t, vary)
			serve := func() {
				r.Serve(ctx, testClientIP, nil)
				if string(ctx.Response.Header.Peek("X-Cache")) != "HIT" {
					t.Fatalf("X-Cache %q", ctx.Response.Header.Peek("X-Cache"))
				}
			}
			if n := testing.AllocsPerRun(500, serve); n != 0 {
				t.Fatalf("a hit allocates %v times", n)
			}
		})
	}
}

// hitRoute is a cached route whose answer for ctx is stored.
func hitRoute(t testing.TB, vary bool) (*Route, *fasthttp.RequestCtx) {
	body := []byte(`{"product":1,"name":"a page's worth of JSON"}`)
	origin := startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Content-Type", "application/json")
		ctx.Response.Header.Set("Cache-Control", "public, max-age=60")
		if vary {
			ctx.Response.Header.Set("Vary", "Accept-Encoding")
		}
		ctx.SetBody(body)
	})
	m, _ := newTestManager(t)
	c := onePool("p", origin)
	c.Routes[0].Cache = &conf.CacheConfig{TTL: time.Hour}
	s := mustBuild(t, m, c)
	ctx := serveCtxWith("/api/items?id=1", "Accept-Encoding: gzip\r\n")
	r := s.Route(ctx.Host(), ctx.Path())
	for range 3 {
		r.Serve(ctx, testClientIP, nil) // the miss, then hits warming the buffers
	}
	if string(ctx.Response.Header.Peek("X-Cache")) != "HIT" || string(ctx.Response.Body()) != string(body) {
		t.Fatalf("not a hit: %q %q", ctx.Response.Header.Peek("X-Cache"), ctx.Response.Body())
	}
	return r, ctx
}

// BenchmarkCacheHit is a hit served on a RequestCtx; BenchmarkServe (the
// same request proxied to a loopback origin) is the rest of the path it
// replaces.
func BenchmarkCacheHit(b *testing.B) {
	r, ctx := hitRoute(b, false)
	b.ReportAllocs()
	for b.Loop() {
		r.Serve(ctx, testClientIP, nil)
	}
}

// TestCacheWaiters: what the requests waiting for a key's one origin
// request get.
func TestCacheWaiters(t *testing.T) {
	// The origin holds a request with X-Hold until the test's gate opens,
	// and answers with its count, private or varying when the query asks.
	var gate atomic.Pointer[chan struct{}]
	var entered atomic.Int64
	origin, n := countingOrigin(t, func(_ int64, ctx *fasthttp.RequestCtx) {
		q := ctx.QueryArgs()
		if len(q.Peek("private")) > 0 {
			ctx.Response.Header.Set("Cache-Control", "private")
		}
		if len(q.Peek("vary")) > 0 {
			ctx.Response.Header.Set("Vary", "Accept-Language")
		}
		if string(ctx.Request.Header.Peek("X-Hold")) == "1" {
			entered.Add(1)
			<-*gate.Load()
		}
	})
	// hold resets the counts and closes a new gate when the test ends.
	hold := func(t *testing.T) func() {
		n.Store(0)
		entered.Store(0)
		ch := make(chan struct{})
		gate.Store(&ch)
		var once sync.Once
		open := func() { once.Do(func() { close(ch) }) }
		t.Cleanup(open)
		return open
	}
	// send starts a GET and returns its answer's body on a channel.
	send := func(e *edge, path string, headers ...string) <-chan string {
		out := make(chan string, 1)
		go func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(path)
			req.Header.SetHost("shop.example")
			for i := 0; i+1 < len(headers); i += 2 {
				req.Header.Set(headers[i], headers[i+1])
			}
			if err := e.c.DoTimeout(req, resp, 10*time.Second); err != nil {
				out <- "error: " + err.Error()
				return
			}
			out <- string(resp.Body())
		}()
		return out
	}
	cacheOf := func(e *edge) *Cache { return e.set.Load().Route([]byte("shop.example"), []byte("/")).cache }

	t.Run("a private answer is not shared: each waiter asks the origin", func(t *testing.T) {
		e, _, _ := cachedRoute(t, conf.CacheConfig{TTL: time.Minute}, origin)
		open := hold(t)
		leader := send(e, "/p?private=1", "X-Hold", "1")
		await.Until(t, 5*time.Second, "the leader at the origin", func() bool { return entered.Load() == 1 })
		waiter := send(e, "/p?private=1")
		await.Until(t, 5*time.Second, "the waiter waiting", func() bool { return cacheOf(e).waiting.Load() == 1 })
		open()
		if a, b := <-leader, <-waiter; a != "1" || b != "2" {
			t.Fatalf("leader %q, waiter %q: want 1 and 2 (the waiter asked the origin itself)", a, b)
		}
	})

	t.Run("lock_timeout: the waiter goes to the origin itself", func(t *testing.T) {
		e, _, _ := cachedRoute(t, conf.CacheConfig{TTL: time.Minute, LockTimeout: 50 * time.Millisecond}, origin)
		open := hold(t)
		leader := send(e, "/slow", "X-Hold", "1")
		await.Until(t, 5*time.Second, "the leader at the origin", func() bool { return entered.Load() == 1 })
		if b := <-send(e, "/slow"); b != "2" {
			t.Fatalf("the waiter got %q, want its own origin answer 2", b)
		}
		open()
		if a := <-leader; a != "1" {
			t.Fatalf("leader %q", a)
		}
	})

	t.Run("a waiter with another value of a Vary header does not get the leader's variant", func(t *testing.T) {
		e, _, _ := cachedRoute(t, conf.CacheConfig{TTL: time.Minute}, origin)
		open := hold(t)
		leader := send(e, "/v?vary=1", "X-Hold", "1", "Accept-Language", "de")
		await.Until(t, 5*time.Second, "the leader at the origin", func() bool { return entered.Load() == 1 })
		same := send(e, "/v?vary=1", "Accept-Language", "de")
		other := send(e, "/v?vary=1", "Accept-Language", "fr")
		await.Until(t, 5*time.Second, "both waiting", func() bool { return cacheOf(e).waiting.Load() == 2 })
		open()
		a, b, o := <-leader, <-same, <-other
		if a != "1" || b != "1" || o != "2" {
			t.Fatalf("leader (de) %q, waiter (de) %q, waiter (fr) %q: want 1, 1, 2", a, b, o)
		}
	})
}

// BenchmarkEdgeCachedGET is BenchmarkEdgeGET with the route cached: client
// -> edge (Route + a hit) on loopback, the origin asked once.
func BenchmarkEdgeCachedGET(b *testing.B) {
	origin, n := countingOrigin(b, nil)
	e, _, _ := cachedRoute(b, conf.CacheConfig{TTL: time.Hour}, origin)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI("/api/items")
	req.Header.SetHost("shop.example")
	b.ReportAllocs()
	for b.Loop() {
		if err := e.c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			b.Fatal(err, resp.StatusCode())
		}
	}
	if n.Load() != 1 {
		b.Fatalf("the origin saw %d requests, want 1", n.Load())
	}
}

// TestCacheRetiredWhileServing: a reload drops a cache while requests are
// inside it (hits and stores, on four goroutines): they all still answer,
// and the old Set's requests from then on bypass it. (The store is closed
// only once no request is inside, since ristretto's Close beside a Set
// would panic; the window is too narrow for this test to hit reliably
// without that, so it is a stress test for -race, not a proof.)
func TestCacheRetiredWhileServing(t *testing.T) {
	origin, _ := countingOrigin(t, nil)
	m, _ := newTestManager(t)
	c := onePool("p", origin)
	c.Routes[0].Cache = &conf.CacheConfig{TTL: time.Minute}
	old := mustBuild(t, m, c)
	r := old.Route([]byte("shop.example"), []byte("/"))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var served atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// A new key every other request: stores as well as hits.
				ctx := serveCtxWith("/k"+strconv.Itoa(g)+"-"+strconv.Itoa(i/2), "")
				r.Serve(ctx, testClientIP, nil)
				if ctx.Response.StatusCode() != 200 {
					t.Errorf("status %d", ctx.Response.StatusCode())
					return
				}
				served.Add(1)
			}
		})
	}
	await.Until(t, 5*time.Second, "requests served", func() bool { return served.Load() > 100 })
	c.Routes[0].Cache = &conf.CacheConfig{TTL: 2 * time.Minute}
	mustBuild(t, m, c) // the old cache is retired
	await.Until(t, 5*time.Second, "the old cache out of use", func() bool { return r.cache.store.Load() == nil })
	at := served.Load()
	await.Until(t, 5*time.Second, "requests after the retirement", func() bool { return served.Load() > at+100 })
	close(stop)
	wg.Wait()
	ctx := serveCtxWith("/k0-0", "")
	r.Serve(ctx, testClientIP, nil)
	if xc := string(ctx.Response.Header.Peek("X-Cache")); xc != "BYPASS" {
		t.Fatalf("the retired cache answered X-Cache %q, want BYPASS", xc)
	}
}
