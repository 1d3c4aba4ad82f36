package filters

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/stock"
	"flashgate/sale/api"
)

// openStock connects a store to addr as an edge does (its Timeout is
// redis.timeout; generous here unless a test is about it).
func openStock(t testing.TB, addr string, timeout time.Duration) *stock.Store {
	t.Helper()
	return stocktest.Open(t, addr, stocktest.Timeout(timeout), stocktest.OrderTTL(time.Hour))
}

// redisEnv is an edge's Env on store; edgeClock replays the test's clock
// in the script instead of Redis's own.
func redisEnv(store *stock.Store, edgeClock bool) (*Env, *clock) {
	env, clk := newEnv()
	env.Stock, env.rateEdgeClock = store, edgeClock
	return env, clk
}

// userRequest is a purchase of user through c at the clock's time.
func userRequest(c *Chain, clk *clock, user string) Verdict {
	r := Request{Call: api.Call{Endpoint: api.EndpointDo, UserID: []byte(user), ClientIP: netip.MustParseAddr("198.51.100.9"), NowNano: clk.now}}
	v := c.Run(&r)
	r.Finish()
	return v
}

// The Redis policy applies the local limiter's arithmetic: the same
// sequence of requests gets the same verdicts, delays and Retry-After from
// a chain with policy local and one with policy redis (no allowance, so
// that every pass is one script call), on a standalone Redis and a Cluster.
func TestRedisLimitMatchesLocal(t *testing.T) {
	srv := redistest.New(t)
	cl := redistest.NewCluster(t)
	stores := map[string]*stock.Store{
		"standalone": openStock(t, srv.Addr(), 10*time.Second),
		"cluster":    openStock(t, strings.Join(cl.Addrs(), ","), 10*time.Second),
	}
	cases := []struct {
		name, yaml string
		user       bool
	}{
		{"burst nodelay", "type: ip_limit\nrate: 1r/s\nburst: 5\nnodelay: true\n", false},
		{"burst 0", "type: ip_limit\nrate: 10r/s\n", false},
		{"per minute", "type: ip_limit\nrate: 30r/m\nburst: 2\nnodelay: true\n", false},
		{"delays", "type: ip_limit\nrate: 2r/s\nburst: 5\n", false},
		{"two stage", "type: ip_limit\nrate: 1r/s\nburst: 5\ndelay: 3\n", false},
		{"user, two rates", saleUserLimitYAML, true},
	}
	rng := rand.New(rand.NewPCG(14, 1))
	for sname, store := range stores {
		for ci, tc := range cases {
			t.Run(sname+"/"+tc.name, func(t *testing.T) {
				localEnv, lclk := newEnv()
				redisE, rclk := redisEnv(store, true)
				name := fmt.Sprintf("name: m%s%d\n", sname, ci) // fresh Redis keys per case
				local := mustBuild(t, localEnv, name+tc.yaml)
				shared := mustBuild(t, redisE, name+tc.yaml+"policy: redis\nallowance: 0\n")
				clients := []string{"198.51.100.1", "2001:db8::1"}
				if tc.user {
					clients = []string{"alice", "bob@example.com"}
				}
				c0 := store.RateCalls()
				for i := range 300 {
					// Bursts at one instant, then gaps of up to 1.5s.
					if rng.IntN(3) == 0 {
						d := time.Duration(rng.IntN(1500)) * time.Millisecond
						lclk.Add(d)
						rclk.Add(d)
					}
					c := clients[rng.IntN(len(clients))]
					var lv, rv Verdict
					if tc.user {
						lv, rv = userRequest(local, lclk, c), userRequest(shared, rclk, c)
					} else {
						lv, rv = request(local, lclk, c), request(shared, rclk, c)
					}
					same := (lv.Reject == nil) == (rv.Reject == nil) && lv.Delay == rv.Delay
					if !tc.user {
						// user_limit's refusal says when every rate passes,
						// the local one when the first refusing one does.
						same = same && lv.RetryAfter == rv.RetryAfter
					} else if lv.Reject != nil && rv.Reject != nil {
						same = same && rv.RetryAfter >= lv.RetryAfter && rv.Reject.Status == lv.Reject.Status
					}
					if !same {
						t.Fatalf("request %d of %s at +%v: local %+v, redis %+v", i+1, c, time.Duration(lclk.now-t0), lv, rv)
					}
				}
				// Redis decided (not the local fallback), refusals included.
				if c1 := store.RateCalls(); c1.Failed != c0.Failed || c1.Passed == c0.Passed || c1.Refused == c0.Refused {
					t.Fatalf("script calls before %+v, after %+v", c0, c1)
				}
			})
		}
	}
}

// Two edges on one Redis share one budget: 2 x 100 requests from one
// address pass what one edge alone passes, not twice that. On the Redis
// server's clock, as in production (1r/m: the test's own time adds nothing).
func TestRedisLimitSharedByEdges(t *testing.T) {
	srv := redistest.New(t)
	cl := redistest.NewCluster(t)
	const spec = "type: ip_limit\nrate: 1r/m\nburst: 40\nnodelay: true\n"
	local := mustBuild(t, nil, spec)
	clk := &clock{now: t0}
	alone := 0
	for range 100 {
		if request(local, clk, "203.0.113.7").Reject == nil {
			alone++
		}
	}
	if alone != 41 {
		t.Fatalf("one edge passed %d of 100, want 41", alone)
	}
	for _, addr := range []string{srv.Addr(), strings.Join(cl.Addrs(), ",")} {
		for _, allowance := range []int{0, 2, 8} {
			var edges [2]*Chain
			var clks [2]*clock
			for i := range edges {
				env, c := redisEnv(openStock(t, addr, 10*time.Second), false)
				edges[i], clks[i] = mustBuild(t, env, fmt.Sprintf("%spolicy: redis\nallowance: %d\nzone: shared%d\n", spec, allowance, allowance)), c
			}
			passed := 0
			for i := range 200 {
				e := i % 2
				clks[e].Add(time.Millisecond)
				if request(edges[e], clks[e], "203.0.113.7").Reject == nil {
					passed++
				}
			}
			// Leases are charged when taken: never more than one edge's
			// figure; at most edges x (allowance-1) fewer.
			if lost := 2 * max(allowance-1, 0); passed > alone || passed < alone-lost {
				t.Fatalf("%s, allowance %d: two edges passed %d, want %d (at most %d fewer)", addr, allowance, passed, alone, lost)
			}
		}
	}
}

// The allowance never admits more than nginx would over the same arrivals
// (three edges, random interleaving, virtual time), and loses at most
// edges x (allowance-1) of a burst.
func TestRedisLimitAllowanceBound(t *testing.T) {
	srv := redistest.New(t)
	const edges, allowance = 3, 5
	const spec = "type: ip_limit\nrate: 10r/s\nburst: 20\nnodelay: true\n"
	rng := rand.New(rand.NewPCG(14, 2))
	for round := range 5 {
		var chains [edges]*Chain
		var clks [edges]*clock
		for i := range chains {
			env, c := redisEnv(openStock(t, srv.Addr(), 10*time.Second), true)
			chains[i], clks[i] = mustBuild(t, env, fmt.Sprintf("%spolicy: redis\nallowance: %d\nzone: bound%d\n", spec, allowance, round)), c
		}
		nginx := mustBuild(t, nil, spec)
		nclk := &clock{now: t0}
		passed, want := 0, 0
		for range 2000 {
			if rng.IntN(4) == 0 {
				d := time.Duration(rng.IntN(30)) * time.Millisecond
				nclk.Add(d)
				for _, c := range clks {
					c.Add(d)
				}
			}
			e := rng.IntN(edges)
			if request(chains[e], clks[e], "203.0.113.8").Reject == nil {
				passed++
			}
			if request(nginx, nclk, "203.0.113.8").Reject == nil {
				want++
			}
		}
		if passed > want {
			t.Fatalf("round %d: %d edges with allowance %d passed %d, nginx %d", round, edges, allowance, passed, want)
		}
		t.Logf("round %d: passed %d, nginx %d", round, passed, want)
	}

	// One instant: the burst's 21 units, minus at most what the edges
	// leased and did not spend.
	var chains [edges]*Chain
	clk := &clock{now: t0}
	for i := range chains {
		env, _ := redisEnv(openStock(t, srv.Addr(), 10*time.Second), true)
		env.Now = clk.Now
		chains[i] = mustBuild(t, env, spec+"policy: redis\nallowance: 5\nzone: instant\n")
	}
	passed := 0
	for i := range 100 {
		if request(chains[i%edges], clk, "203.0.113.9").Reject == nil {
			passed++
		}
	}
	if passed > 21 || passed < 21-edges*(allowance-1) {
		t.Fatalf("one instant: passed %d, want 21 at most and at least %d", passed, 21-edges*(allowance-1))
	}
}

// A refusal is remembered: the key is refused at the edge, without a
// script call, until Redis said it could pass; a lease is spent at the
// edge. Counted by the store's calls.
func TestRedisLimitCachesRefusalsAndLeases(t *testing.T) {
	store := openStock(t, redistest.New(t).Addr(), 10*time.Second)
	env, clk := redisEnv(store, true)
	ch := mustBuild(t, env, "type: ip_limit\nrate: 1r/s\nburst: 5\nnodelay: true\npolicy: redis\nallowance: 4\n")
	calls := func() uint64 { c := store.RateCalls(); return c.Passed + c.Refused + c.Failed }
	for i := range 6 {
		if v := request(ch, clk, "192.0.2.1"); v.Reject != nil {
			t.Fatalf("request %d refused", i+1)
		}
	}
	if n := calls(); n != 2 {
		t.Fatalf("6 passes cost %d calls, want 2 (a lease of 4, then the 2 left)", n)
	}
	v := request(ch, clk, "192.0.2.1")
	if v.Reject == nil || v.RetryAfter != 1 || calls() != 3 {
		t.Fatalf("7th: %+v after %d calls, want refused by the 3rd call", v, calls())
	}
	for range 100 {
		clk.Add(9 * time.Millisecond)
		if v := request(ch, clk, "192.0.2.1"); v.Reject == nil {
			t.Fatal("passed while the refusal holds")
		}
	}
	if n := calls(); n != 3 {
		t.Fatalf("refused requests cost %d calls, want none", n)
	}
	clk.Add(100 * time.Millisecond) // 1s after the burst: one unit back
	if v := request(ch, clk, "192.0.2.1"); v.Reject != nil || calls() != 4 {
		t.Fatalf("after the wait: %+v, %d calls", v, calls())
	}
}

// on_redis_error with Redis stopped: allow passes, deny refuses, local
// (the default) applies the limit with the edge's own state. After a
// failure the filter waits a second before asking Redis again.
func TestRedisLimitOnRedisError(t *testing.T) {
	srv := redistest.New(t)
	store := openStock(t, srv.Addr(), 200*time.Millisecond)
	srv.Stop()
	for _, tc := range []struct {
		onError    string
		wantPassed int
	}{{"allow", 10}, {"deny", 0}, {"", 3}} {
		env, clk := redisEnv(store, false)
		spec := "type: ip_limit\nrate: 1r/m\nburst: 2\nnodelay: true\npolicy: redis\nname: e" + tc.onError + "\n"
		if tc.onError != "" {
			spec += "on_redis_error: " + tc.onError + "\n"
		}
		ch := mustBuild(t, env, spec)
		before := store.RateCalls().Failed
		passed := 0
		for range 10 {
			v := request(ch, clk, "192.0.2.2")
			if v.Reject == nil {
				passed++
			} else if v.Reject.Status != 429 || v.RetryAfter < 1 {
				t.Fatalf("%q: refusal %+v", tc.onError, v)
			}
		}
		if passed != tc.wantPassed {
			t.Fatalf("on_redis_error %q: %d of 10 passed, want %d", tc.onError, passed, tc.wantPassed)
		}
		if n := store.RateCalls().Failed - before; n != 1 {
			t.Fatalf("on_redis_error %q: %d failed calls in 10 requests, want 1 (a pause after a failure)", tc.onError, n)
		}
		clk.Add(redisErrorPause)
		request(ch, clk, "192.0.2.2")
		if n := store.RateCalls().Failed - before; n != 2 {
			t.Fatalf("on_redis_error %q: %d failed calls a second later, want 2", tc.onError, n)
		}
	}
}

// redis.timeout bounds a decision while Redis hangs (paused): the request
// is answered by on_redis_error once the budget is spent.
func TestRedisLimitTimeoutBoundsAPausedRedis(t *testing.T) {
	srv := redistest.New(t)
	store := openStock(t, srv.Addr(), 100*time.Millisecond)
	env, clk := redisEnv(store, false)
	ch := mustBuild(t, env, "type: ip_limit\nrate: 1r/s\npolicy: redis\non_redis_error: allow\n")
	if v := request(ch, clk, "192.0.2.3"); v.Reject != nil {
		t.Fatalf("before the pause: %+v", v)
	}
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	v := request(ch, clk, "192.0.2.4")
	if took := time.Since(start); v.Reject != nil || took > 2*time.Second {
		t.Fatalf("paused Redis: %+v after %v with a 100ms budget", v, took)
	}
	if f := store.RateCalls().Failed; f != 1 {
		t.Fatalf("failed calls %d, want 1", f)
	}
}

func TestRedisLimitConfigErrors(t *testing.T) {
	store := openStock(t, "embedded", 10*time.Second)
	env, _ := redisEnv(store, false)
	for _, tc := range []struct{ yaml, field string }{
		{"type: ip_limit\nrate: 1r/s\npolicy: cluster\n", "[0].policy"},
		{"type: ip_limit\nrate: 1r/s\npolicy: redis\nallowance: 1001\n", "[0].allowance"},
		{"type: ip_limit\nrate: 1r/s\npolicy: redis\nallowance: -1\n", "[0].allowance"},
		{"type: ip_limit\nrate: 1r/s\npolicy: redis\non_redis_error: panic\n", "[0].on_redis_error"},
		{"type: user_limit\npolicy: redis\nallowance: 5000\n", "[0].allowance"},
	} {
		_, errs := Build(specsOf(t, tc.yaml), env)
		if len(errs) == 0 || errs[0].Path != tc.field {
			t.Errorf("%q: errors %v, want one at %s", tc.yaml, errs, tc.field)
		}
	}
	// No store: a clear error, unless the chain is only checked (proxy -t).
	noStore, _ := newEnv()
	_, errs := Build(specsOf(t, "type: user_limit\npolicy: redis\n"), noStore)
	if len(errs) == 0 || errs[0].Path != "[0].policy" || !strings.Contains(errs[0].Msg, "Redis store") {
		t.Errorf("policy redis without a store: %v", errs)
	}
	noStore.CheckOnly = true
	if _, errs := Build(specsOf(t, "type: user_limit\npolicy: redis\n"), noStore); len(errs) != 0 {
		t.Errorf("policy redis checked offline: %v", errs)
	}
	// The embedded server runs the script too.
	ch := mustBuild(t, env, "type: user_limit\npolicy: redis\n")
	_, clk := newEnv()
	for i := range 6 {
		if v := userRequest(ch, clk, "carol"); v.Reject != nil {
			t.Fatalf("embedded: request %d refused", i+1)
		}
	}
	if v := userRequest(ch, clk, "carol"); v.Reject == nil {
		t.Fatal("embedded: the 7th request at one instant passed")
	}
}

// A decision the edge's cache answers (a remembered refusal, a leased
// unit) allocates nothing.
func TestRedisLimitCachedAllocs(t *testing.T) {
	store := openStock(t, redistest.New(t).Addr(), 10*time.Second)
	env, clk := redisEnv(store, true)
	refuse := mustBuild(t, env, "type: ip_limit\nname: refuse\nrate: 1r/m\npolicy: redis\n")
	lease := mustBuild(t, env, "type: ip_limit\nname: lease\nrate: 1r/s\nburst: 1000\nnodelay: true\npolicy: redis\nallowance: 1000\n")
	addr := netip.MustParseAddr("192.0.2.5")
	request(refuse, clk, "192.0.2.5")
	request(refuse, clk, "192.0.2.5") // refused: remembered for a minute
	request(lease, clk, "192.0.2.5")  // 1000 units leased
	calls := store.RateCalls()
	r := &Request{} // the proxy's pooled request
	for name, ch := range map[string]*Chain{"refusal": refuse, "lease": lease} {
		n := testing.AllocsPerRun(200, func() {
			r.ClientIP, r.NowNano = addr, clk.now
			ch.Run(r)
			r.Reset()
		})
		if n != 0 {
			t.Errorf("%s from the cache: %v allocations per decision", name, n)
		}
	}
	if store.RateCalls() != calls {
		t.Fatalf("the cache asked Redis: %+v, then %+v", calls, store.RateCalls())
	}
}

// BenchmarkHotKey: one client's requests through ip_limit, local against
// redis without and with an allowance (under the limit: every request
// passes), and redis over the limit (the refusal cache). calls/op is the
// Redis script calls per request.
func BenchmarkHotKey(b *testing.B) {
	srv := redistest.New(b)
	store := openStock(b, srv.Addr(), 10*time.Second)
	const under = "type: ip_limit\nrate: 1000000r/s\nburst: 100000\nnodelay: true\n"
	for _, bc := range []struct{ name, yaml string }{
		{"local", under},
		{"redis-allowance-1", under + "policy: redis\nallowance: 1\n"},
		{"redis-allowance-2", under + "policy: redis\n"}, // the default
		{"redis-allowance-16", under + "policy: redis\nallowance: 16\n"},
		{"redis-over-limit", "type: ip_limit\nrate: 1r/m\npolicy: redis\n"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			env, _ := redisEnv(store, false)
			env.Now = wallNow
			ch := mustBuild(b, env, fmt.Sprintf("name: %s%d\n%s", bc.name, time.Now().UnixNano(), bc.yaml))
			addr := netip.MustParseAddr("192.0.2.10")
			c0 := store.RateCalls()
			r := &Request{}
			b.ResetTimer()
			for range b.N {
				r.ClientIP = addr
				ch.Run(r)
				r.Reset()
			}
			b.StopTimer()
			c1 := store.RateCalls()
			calls := (c1.Passed + c1.Refused + c1.Failed) - (c0.Passed + c0.Refused + c0.Failed)
			b.ReportMetric(float64(calls)/float64(b.N), "calls/op")
		})
	}
}

// Concurrent requests of one key on one edge: only one of them asks for a
// lease, the others for their own unit, so that the unspent units stay
// within allowance-1 for the edge. 21 requests at one instant against a
// burst of 20 (21 units): at least 21-(allowance-1) pass.
func TestRedisLimitOneLeaseAtATime(t *testing.T) {
	store := openStock(t, redistest.New(t).Addr(), 10*time.Second)
	const allowance = 5
	for round := range 20 {
		env, clk := redisEnv(store, true)
		ch := mustBuild(t, env, fmt.Sprintf("type: ip_limit\nrate: 1r/m\nburst: 20\nnodelay: true\npolicy: redis\nallowance: %d\nzone: one%d\n", allowance, round))
		start := make(chan struct{})
		var passed atomic.Int64
		var wg sync.WaitGroup
		for range 21 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if request(ch, clk, "192.0.2.20").Reject == nil {
					passed.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := passed.Load(); n > 21 || n < 21-(allowance-1) {
			t.Fatalf("round %d: %d of 21 concurrent requests passed, want at least %d", round, n, 21-(allowance-1))
		}
	}
}
