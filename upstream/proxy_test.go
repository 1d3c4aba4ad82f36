package upstream

import (
	"bufio"
	"flashgate/conf"
	"flashgate/internal/await"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func onePool(name string, servers ...string) conf.UpstreamsConfig {
	return conf.UpstreamsConfig{
		Pools:  []conf.PoolConfig{{Name: name, Servers: servers}},
		Routes: []conf.RouteConfig{{Prefix: "/", Pool: name}},
	}
}

func TestRoutingThroughEdge(t *testing.T) {
	m, _ := newTestManager(t)
	web, api, shop := idOrigin(t, "web"), idOrigin(t, "api"), idOrigin(t, "shop")
	s := mustBuild(t, m, conf.UpstreamsConfig{
		Pools: []conf.PoolConfig{
			{Name: "web", Servers: []string{web}},
			{Name: "api", Servers: []string{api}},
			{Name: "shop", Servers: []string{shop}},
		},
		Routes: []conf.RouteConfig{
			{Prefix: "/", Pool: "web"},
			{Prefix: "/api/", Pool: "api"},
			{Prefix: "/", Host: "shop.example", Pool: "shop"},
		},
	})
	e := startEdge(t, s)
	tests := []struct{ host, path, want string }{
		{"a.example", "/", "web"},
		{"a.example", "/api/x", "api"},
		{"shop.example:80", "/api/x", "shop"},
	}
	for _, tc := range tests {
		t.Run(tc.host+tc.path, func(t *testing.T) {
			if code, body, _ := e.do(t, "GET", tc.host, tc.path, nil); code != 200 || body != tc.want {
				t.Fatalf("got %d %q, want 200 %q", code, body, tc.want)
			}
		})
	}
}

func TestBalancers(t *testing.T) {
	for _, balance := range []string{conf.RoundRobin, conf.LeastPending} {
		t.Run(balance+" spreads sequential requests evenly", func(t *testing.T) {
			m, _ := newTestManager(t)
			c := onePool("p", idOrigin(t, "a"), idOrigin(t, "b"), idOrigin(t, "c"))
			c.Pools[0].Balance = balance
			e := startEdge(t, mustBuild(t, m, c))
			counts := map[string]int{}
			for range 30 {
				_, body, _ := e.do(t, "GET", "x", "/", nil)
				counts[body]++
			}
			if counts["a"] != 10 || counts["b"] != 10 || counts["c"] != 10 {
				t.Fatalf("distribution %v, want 10 each", counts)
			}
		})
	}

	t.Run("least_pending avoids the busy server", func(t *testing.T) {
		m, _ := newTestManager(t)
		entered := make(chan string, 2)
		release := make(chan struct{})
		blocking := func(id string) string {
			return startOrigin(t, func(ctx *fasthttp.RequestCtx) {
				if string(ctx.Path()) == "/block" {
					entered <- id
					<-release
				}
				ctx.SetBodyString(id)
			})
		}
		c := onePool("p", blocking("a"), blocking("b"))
		c.Pools[0].Balance = conf.LeastPending
		e := startEdge(t, mustBuild(t, m, c))
		t.Cleanup(func() { close(release) }) // before the origins shut down

		done := make(chan struct{})
		go func() {
			defer close(done)
			e.do(t, "GET", "x", "/block", nil)
		}()
		busy := <-entered
		for range 10 {
			if _, body, _ := e.do(t, "GET", "x", "/", nil); body == busy {
				t.Fatalf("request went to %s, which has a request pending", busy)
			}
		}
		release <- struct{}{}
		<-done
	})
}

func TestRetryOnlyIdempotentOnDialError(t *testing.T) {
	m, _ := newTestManager(t)
	var mu sync.Mutex
	seen := map[string]int{}
	live := startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		seen[string(ctx.Method())]++
		mu.Unlock()
		ctx.SetBodyString("live")
	})
	c := onePool("p", deadAddr(t), live)
	c.Pools[0].MaxRetries = intPtr(1)
	c.Pools[0].Passive.MaxFails = intPtr(0) // keep the dead server in rotation
	e := startEdge(t, mustBuild(t, m, c))

	tests := []struct {
		method    string
		body      []byte
		want502   int // of 10 requests, round robin puts 5 on the dead server
		retryable bool
	}{
		{"GET", nil, 0, true},
		{"HEAD", nil, 0, true},
		{"OPTIONS", nil, 0, true},
		{"POST", []byte(`{"a":1}`), 5, false},
		{"POST", nil, 5, false},
		{"PUT", []byte("x"), 5, false},
		{"DELETE", nil, 5, false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s body=%v", tc.method, tc.body != nil), func(t *testing.T) {
			bad := 0
			for range 10 {
				code, _, _ := e.do(t, tc.method, "x", "/", tc.body)
				switch code {
				case 200:
				case 502:
					bad++
				default:
					t.Fatalf("status %d", code)
				}
			}
			if bad != tc.want502 {
				t.Fatalf("%d of 10 got 502, want %d", bad, tc.want502)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["POST"] != 10 || seen["GET"] != 10 {
		t.Fatalf("origin saw %v: each request must arrive exactly once", seen)
	}
}

func TestBadGatewayAndTimeout(t *testing.T) {
	m, logs := newTestManager(t)
	var codes []int
	var mu sync.Mutex
	m.OnResponse = func(pool string, status int, d time.Duration) {
		mu.Lock()
		codes = append(codes, status)
		mu.Unlock()
	}
	release := make(chan struct{})
	slow := startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		<-release
		ctx.SetBodyString("late")
	})
	t.Cleanup(func() { close(release) })
	dead := deadAddr(t)
	c := conf.UpstreamsConfig{
		Pools: []conf.PoolConfig{
			{Name: "dead", Servers: []string{dead}},
			{Name: "slow", Servers: []string{slow}, ReadTimeout: 50 * time.Millisecond},
		},
		Routes: []conf.RouteConfig{{Prefix: "/dead", Pool: "dead"}, {Prefix: "/slow", Pool: "slow"}},
	}
	e := startEdge(t, mustBuild(t, m, c))

	tests := []struct {
		path   string
		status int
		body   string
	}{
		{"/dead", 502, `{"code":"BAD_GATEWAY","message":"origin unavailable"}`},
		{"/slow", 504, `{"code":"GATEWAY_TIMEOUT","message":"origin timed out"}`},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			code, body, resp := e.do(t, "GET", "x", tc.path, nil)
			if code != tc.status || body != tc.body {
				t.Fatalf("got %d %s, want %d %s", code, body, tc.status, tc.body)
			}
			if ct := string(resp.Header.ContentType()); ct != "application/json" {
				t.Errorf("content-type %q", ct)
			}
		})
	}
	if log := logs.String(); !strings.Contains(log, dead) || !strings.Contains(log, "pool=slow") {
		t.Errorf("log lacks the detail:\n%s", log)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(codes) != "[502 504]" {
		t.Errorf("OnResponse saw %v, want [502 504]", codes)
	}
}

func TestHopByHopAndForwardingHeaders(t *testing.T) {
	m, _ := newTestManager(t)
	got := make(chan *fasthttp.Request, 1)
	origin := startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		r := new(fasthttp.Request)
		ctx.Request.CopyTo(r)
		got <- r
		// The origin's own hop-by-hop headers must not reach the client.
		ctx.Response.Header.Set("Connection", "X-Origin-Secret")
		ctx.Response.Header.Set("X-Origin-Secret", "s")
		ctx.Response.Header.Set("Keep-Alive", "timeout=5")
		ctx.Response.Header.Set("Proxy-Authenticate", "Basic")
		ctx.Response.Header.Set("Upgrade", "h2c")
		ctx.Response.Header.Set("X-End-To-End", "kept")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) { // chunked on the wire
			w.WriteString("streamed")
		})
	})
	e := startEdge(t, mustBuild(t, m, onePool("p", origin)))

	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := "POST /submit?q=1 HTTP/1.1\r\n" +
		"Host: Shop.Example:8443\r\n" +
		"Connection: keep-alive, X-Client-Secret\r\n" +
		"X-Client-Secret: c\r\n" +
		"Keep-Alive: 300\r\n" +
		"Proxy-Connection: keep-alive\r\n" +
		"Proxy-Authorization: Basic Zm9vOmJhcg==\r\n" +
		"TE: trailers\r\n" +
		"Upgrade: websocket\r\n" +
		"X-Forwarded-For: 198.51.100.1\r\n" +
		"X-Forwarded-For: 198.51.100.2\r\n" +
		"X-Forwarded-Proto: https\r\n" +
		"X-Real-IP: 6.6.6.6\r\n" +
		"X-End-To-End: yes\r\n" +
		"Transfer-Encoding: chunked\r\n" +
		"\r\n" +
		"5\r\nhello\r\n0\r\n\r\n"
	if _, err := conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 64)
	n, _ := resp.Body.Read(body)
	resp.Body.Close()
	r := <-got

	t.Run("request", func(t *testing.T) {
		want := map[string]string{
			"Host":                "Shop.Example:8443",
			"X-Client-Secret":     "",
			"Connection":          "",
			"Keep-Alive":          "",
			"Proxy-Connection":    "",
			"Proxy-Authorization": "",
			"TE":                  "",
			"Upgrade":             "",
			"Transfer-Encoding":   "",
			"Expect":              "",
			"Content-Length":      "5",
			// The peer is no trusted proxy: its list is its own claim.
			"X-Forwarded-For":   "127.0.0.1",
			"X-Real-IP":         testClientIP.String(),
			"X-Forwarded-Proto": "http",
			"X-End-To-End":      "yes",
		}
		for k, v := range want {
			if g := string(r.Header.Peek(k)); g != v {
				t.Errorf("%s = %q, want %q", k, g, v)
			}
		}
		if string(r.Body()) != "hello" || string(r.RequestURI()) != "/submit?q=1" {
			t.Errorf("body %q uri %q", r.Body(), r.RequestURI())
		}
	})
	t.Run("response", func(t *testing.T) {
		for _, k := range []string{"Connection", "X-Origin-Secret", "Keep-Alive", "Proxy-Authenticate", "Upgrade"} {
			if v := resp.Header.Get(k); v != "" {
				t.Errorf("%s = %q reached the client", k, v)
			}
		}
		if resp.Header.Get("X-End-To-End") != "kept" || string(body[:n]) != "streamed" || resp.ContentLength != 8 {
			t.Errorf("X-End-To-End %q body %q length %d", resp.Header.Get("X-End-To-End"), body[:n], resp.ContentLength)
		}
		if resp.Close {
			t.Error("the origin's Connection header closed the client's connection")
		}
	})
}

func TestActiveHealthCheck(t *testing.T) {
	m, logs := newTestManager(t)
	var sick atomic.Bool // b's health endpoint fails while set
	health := func(id string, failing *atomic.Bool) string {
		return startOrigin(t, func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == "/health" && failing.Load() {
				ctx.SetStatusCode(503)
				return
			}
			ctx.SetBodyString(id)
		})
	}
	a, b := health("a", new(atomic.Bool)), health("b", &sick)
	c := onePool("p", a, b)
	c.Pools[0].Health = conf.HealthConfig{Path: "/health", Interval: 5 * time.Millisecond, Timeout: time.Second, Rise: 2, Fall: 2}
	c.Pools[0].MaxRetries = intPtr(0)
	sick.Store(true)
	e := startEdge(t, mustBuild(t, m, c))

	await.Until(t, 10*time.Second, "b marked down", func() bool { return !stateOf(m, "p", b).Up })
	for range 10 {
		if code, body, _ := e.do(t, "GET", "x", "/", nil); code != 200 || body != "a" {
			t.Fatalf("got %d %q, want only a while b is down", code, body)
		}
	}
	sick.Store(false)
	await.Until(t, 10*time.Second, "b back up", func() bool { return stateOf(m, "p", b).Healthy })
	counts := map[string]int{}
	for range 10 {
		_, body, _ := e.do(t, "GET", "x", "/", nil)
		counts[body]++
	}
	if counts["a"] != 5 || counts["b"] != 5 {
		t.Fatalf("after recovery %v, want 5 each", counts)
	}
	if l := logs.String(); !strings.Contains(l, "upstream server down") || !strings.Contains(l, "upstream server up") {
		t.Errorf("state changes not logged:\n%s", l)
	}
}

func TestActiveHealthCheckClosedListener(t *testing.T) {
	m, _ := newTestManager(t)
	a, dead := idOrigin(t, "a"), deadAddr(t)
	c := onePool("p", a, dead)
	c.Pools[0].Health = conf.HealthConfig{Path: "/", Interval: 5 * time.Millisecond, Fall: 1}
	c.Pools[0].MaxRetries = intPtr(0)
	c.Pools[0].Passive.MaxFails = intPtr(0)
	e := startEdge(t, mustBuild(t, m, c))
	await.Until(t, 10*time.Second, "dead server down", func() bool { return !stateOf(m, "p", dead).Up })
	for range 10 {
		if code, _, _ := e.do(t, "GET", "x", "/", nil); code != 200 {
			t.Fatalf("status %d: the down server was picked", code)
		}
	}
}

func TestPassiveEjection(t *testing.T) {
	m, logs := newTestManager(t)
	clock := newFakeClock()
	m.now = clock.Now
	live, dead := idOrigin(t, "live"), deadAddr(t)
	c := onePool("p", live, dead)
	c.Pools[0].MaxRetries = intPtr(0) // let failures show
	c.Pools[0].Passive = conf.PassiveConfig{MaxFails: intPtr(2), FailTimeout: 10 * time.Second}
	e := startEdge(t, mustBuild(t, m, c))

	statuses := func(n int) (bad int) {
		for range n {
			if code, _, _ := e.do(t, "GET", "x", "/", nil); code == 502 {
				bad++
			}
		}
		return bad
	}
	if bad := statuses(4); bad != 2 {
		t.Fatalf("%d of 4 failed before ejection, want 2 (max_fails)", bad)
	}
	if st := stateOf(m, "p", dead); !st.Ejected || st.Healthy {
		t.Fatalf("dead server not ejected: %+v", st)
	}
	if bad := statuses(10); bad != 0 {
		t.Fatalf("%d failures while the dead server is ejected", bad)
	}
	clock.Advance(11 * time.Second)
	if bad := statuses(4); bad != 1 {
		t.Fatalf("%d failures after the ejection expired, want exactly 1 (re-ejected at once)", bad)
	}
	if !stateOf(m, "p", dead).Ejected {
		t.Fatal("not re-ejected after a failure following the pause")
	}
	if !strings.Contains(logs.String(), "upstream server ejected") {
		t.Error("ejection not logged")
	}

	t.Run("failures outside the window do not add up", func(t *testing.T) {
		m, _ := newTestManager(t)
		m.now = clock.Now
		e := startEdge(t, mustBuild(t, m, c))
		for range 3 {
			clock.Advance(11 * time.Second)
			e.do(t, "GET", "x", "/", nil) // live
			e.do(t, "GET", "x", "/", nil) // dead: one failure per window
		}
		if st := stateOf(m, "p", dead); st.Ejected || st.Fails != 1 {
			t.Fatalf("state %+v, want one failure, not ejected", st)
		}
	})
	t.Run("a single server is never ejected", func(t *testing.T) {
		m, _ := newTestManager(t)
		e := startEdge(t, mustBuild(t, m, onePool("p", dead)))
		for range 5 {
			e.do(t, "GET", "x", "/", nil)
		}
		if st := stateOf(m, "p", dead); st.Ejected {
			t.Fatalf("state %+v", st)
		}
	})
}

func TestReloadKeepsState(t *testing.T) {
	m, _ := newTestManager(t)
	a, dead := idOrigin(t, "a"), deadAddr(t)
	c := onePool("p", a, dead)
	c.Pools[0].Health = conf.HealthConfig{Path: "/", Interval: 5 * time.Millisecond, Fall: 1}
	s1 := mustBuild(t, m, c)
	await.Until(t, 10*time.Second, "dead server down", func() bool { return !stateOf(m, "p", dead).Up })
	k := serverKey{"p", dead}
	m.mu.Lock()
	ck := m.checkers[k]
	m.mu.Unlock()

	t.Run("equal config", func(t *testing.T) {
		s2, err := m.Build(c.WithDefaults())
		if err != nil {
			t.Fatal(err)
		}
		if s2.pools[0].servers[0].hc != s1.pools[0].servers[0].hc {
			t.Error("connection pool not reused")
		}
		m.Activate(s2)
		if stateOf(m, "p", dead).Up {
			t.Fatal("health state lost on reload")
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.checkers[k] != ck || len(m.checkers) != 2 {
			t.Fatal("health checker restarted on an equal reload")
		}
	})
	t.Run("discarded build changes nothing", func(t *testing.T) {
		c2 := onePool("q", deadAddr(t))
		c2.Pools[0].Health.Path = "/"
		if _, err := m.Build(c2.WithDefaults()); err != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.checkers) != 2 || m.checkers[k] != ck {
			t.Fatal("Build started or stopped checkers")
		}
	})
	t.Run("removed server", func(t *testing.T) {
		c3 := onePool("p", a)
		c3.Pools[0].Health = c.Pools[0].Health
		mustBuild(t, m, c3)
		select {
		case <-ck.stop:
		default:
			t.Fatal("checker of a removed server still running")
		}
		if len(m.Snapshot()) != 1 {
			t.Fatalf("snapshot %v", m.Snapshot())
		}
		// Back again: a new server starts trusted and is checked anew.
		mustBuild(t, m, c)
		await.Until(t, 10*time.Second, "re-added server checked down", func() bool { return !stateOf(m, "p", dead).Up })
	})
	t.Run("health check removed", func(t *testing.T) {
		c4 := onePool("p", a, dead)
		mustBuild(t, m, c4)
		if !stateOf(m, "p", dead).Up {
			t.Fatal("server stays down without a check to bring it back")
		}
	})
}

func TestCloseStopsCheckers(t *testing.T) {
	m := NewManager(nil)
	c := onePool("p", idOrigin(t, "a"))
	c.Pools[0].Health = conf.HealthConfig{Path: "/", Interval: time.Millisecond}
	mustBuild(t, m, c)
	m.Close() // returns only once every checker goroutine has exited
	m.Activate(mustBuildOnly(t, m, c))
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.checkers) != 0 {
		t.Fatal("Activate after Close started checkers")
	}
}

func mustBuildOnly(t testing.TB, m *Manager, c conf.UpstreamsConfig) *Set {
	s, err := m.Build(c.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestExpectContinueNotForwarded(t *testing.T) {
	m, _ := newTestManager(t)
	got := make(chan string, 1)
	origin := startOrigin(t, func(ctx *fasthttp.RequestCtx) {
		got <- string(ctx.Request.Header.Peek("Expect")) + "|" + string(ctx.Request.Body())
	})
	e := startEdge(t, mustBuild(t, m, onePool("p", origin)))
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.SetRequestURI("/order")
	req.Header.SetHost("x")
	req.Header.Set("Expect", "100-continue")
	req.SetBodyString("payload")
	if err := e.c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
		t.Fatal(err, resp.StatusCode())
	}
	if g := <-got; g != "|payload" {
		t.Fatalf("origin saw Expect|body = %q", g)
	}
}

// TestOriginDeadlineNeverEarly pins the origin connections' deadline steps: a kept
// deadline is never before the one asked and at most its slack (1/16 of
// the timeout) after; a later ask past the slack, or a clear, reaches the
// socket.
func TestOriginDeadlineNeverEarly(t *testing.T) {
	var d deadline
	var sets []time.Time
	set := func(at time.Time) error { sets = append(sets, at); return nil }
	const timeout = 1600 * time.Millisecond
	now := time.Now()
	if err := d.set(now.Add(timeout), set); err != nil || len(sets) != 1 {
		t.Fatalf("first deadline: err %v, %d sets", err, len(sets))
	}
	if late := sets[0].Sub(now.Add(timeout)); late < 0 || late > timeout/16 {
		t.Fatalf("set %v after the asked deadline: want 0..%v", late, timeout/16)
	}
	// Asked a little later (the next request): the socket's still bounds it.
	_ = d.set(now.Add(timeout+time.Millisecond), set)
	if len(sets) != 1 {
		t.Fatalf("a deadline within the slack was set again")
	}
	// Asked past the slack: set anew.
	_ = d.set(now.Add(timeout+timeout/8), set)
	if len(sets) != 2 || sets[1].Before(now.Add(timeout+timeout/8)) {
		t.Fatalf("a deadline past the slack: sets %v", sets)
	}
	// Asked earlier than the one on the socket (a shorter timeout): set.
	_ = d.set(now.Add(time.Millisecond), set)
	if len(sets) != 3 || sets[2].After(now.Add(time.Millisecond+maxDeadlineSlack)) {
		t.Fatalf("an earlier deadline was not set: sets %v", sets)
	}
	_ = d.set(time.Time{}, set)
	if len(sets) != 4 || !sets[3].IsZero() {
		t.Fatalf("clearing the deadline did not reach the socket: %v", sets)
	}
	_ = d.set(time.Time{}, set)
	if len(sets) != 4 {
		t.Fatalf("clearing an absent deadline reached the socket")
	}
}
