package filters

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"flashgate/sale/api"
)

const client = "198.51.100.1"

// The nginx example through the whole chain: rate=1r/s burst=5 nodelay lets
// burst+1 = 6 simultaneous requests through (see TestLimiterBurstNodelay for
// the arithmetic) and rejects the 7th with 429 and Retry-After: 1.
func TestIPLimitNginxBurst(t *testing.T) {
	env, clk := newEnv()
	c := mustBuild(t, env, "type: ip_limit\nrate: 1r/s\nburst: 5\nnodelay: true\n")
	for i := range 6 {
		if v := request(c, clk, client); v.Reject != nil || v.Delay != 0 {
			t.Fatalf("request %d: %+v, want an undelayed pass", i+1, v)
		}
	}
	v := request(c, clk, client)
	if v.Reject == nil || v.Reject.Status != 429 || v.Reject.Code != "RATE_LIMITED" || v.Reject.Message != "too many requests" {
		t.Fatalf("7th: %+v, want 429 RATE_LIMITED", v)
	}
	if v.RetryAfter != 1 {
		t.Fatalf("Retry-After = %d, want 1", v.RetryAfter)
	}
	if string(v.Reject.Body) != `{"code":"RATE_LIMITED","message":"too many requests"}` {
		t.Fatalf("body %s", v.Reject.Body)
	}
	if v := request(c, clk, "198.51.100.2"); v.Reject != nil {
		t.Fatal("another client was limited")
	}
	clk.Add(time.Second)
	if v := request(c, clk, client); v.Reject != nil {
		t.Fatal("a token returned after 1 s, but the request was rejected")
	}
	if v := request(c, clk, client); v.Reject == nil {
		t.Fatal("only one token returned after 1 s")
	}
}

func TestIPLimitRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want int
	}{
		{"rate: 30r/m", 2},
		{"rate: 1r/m", 63}, // nginx's 16 milli-requests/s: 62.5 s, rounded up
		{"rate: 10r/s", 1}, // 100 ms, at least 1
		{"rate: 6r/m\nburst: 2\nnodelay: true", 10},
	} {
		t.Run(tc.yaml, func(t *testing.T) {
			env, clk := newEnv()
			c := mustBuild(t, env, "type: ip_limit\n"+tc.yaml+"\n")
			var v Verdict
			for v.Reject == nil {
				v = request(c, clk, client)
			}
			if v.RetryAfter != tc.want {
				t.Fatalf("Retry-After = %d, want %d", v.RetryAfter, tc.want)
			}
		})
	}
}

// Without nodelay, nginx delays the burst to the rate; the verdict carries
// the delay for the proxy to apply. With delay=N the first N of the burst go
// at once.
func TestIPLimitDelay(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want []time.Duration // -1: rejected
	}{
		{"rate: 2r/s\nburst: 3", []time.Duration{0, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond, -1}},
		{"rate: 2r/s\nburst: 3\ndelay: 2", []time.Duration{0, 0, 0, 500 * time.Millisecond, -1}},
		{"rate: 2r/s\nburst: 3\nnodelay: true", []time.Duration{0, 0, 0, 0, -1}},
		{"rate: 2r/s\nburst: 3\ndelay: 9", []time.Duration{0, 0, 0, 0, -1}},
	} {
		t.Run(tc.yaml, func(t *testing.T) {
			env, clk := newEnv()
			c := mustBuild(t, env, "type: ip_limit\n"+tc.yaml+"\n")
			for i, want := range tc.want {
				v := request(c, clk, client)
				if want < 0 {
					if v.Reject == nil {
						t.Fatalf("request %d passed, want rejected", i+1)
					}
					continue
				}
				if v.Reject != nil || v.Delay != want {
					t.Fatalf("request %d: %+v, want delay %v", i+1, v, want)
				}
			}
		})
	}
}

// A reload with the same zone keeps the buckets, even when the rate changes
// (as nginx keeps a shared zone); a new zone name starts afresh.
func TestIPLimitStateSurvivesReload(t *testing.T) {
	env, clk := newEnv()
	c := mustBuild(t, env, "type: ip_limit\nrate: 1r/s\nburst: 2\nnodelay: true\n")
	for range 3 {
		request(c, clk, client)
	}
	if v := request(c, clk, client); v.Reject == nil {
		t.Fatal("4th passed before the reload")
	}
	c = mustBuild(t, env, "type: ip_limit\nrate: 2r/s\nburst: 2\nnodelay: true\n")
	if v := request(c, clk, client); v.Reject == nil {
		t.Fatal("the reload reset the client's bucket")
	}
	clk.Add(500 * time.Millisecond) // at the new rate, one token
	if v := request(c, clk, client); v.Reject != nil {
		t.Fatal("the new rate does not apply to the kept bucket")
	}
	c = mustBuild(t, env, "type: ip_limit\nrate: 2r/s\nburst: 2\nnodelay: true\nzone: fresh\n")
	if v := request(c, clk, client); v.Reject != nil {
		t.Fatal("a new zone name should start empty")
	}
	// A zone is named after the filter by default.
	c = mustBuild(t, env, "type: ip_limit\nname: per_ip\nrate: 1r/s\n")
	request(c, clk, client)
	if env.Zones.Limiter("per_ip", 0).Len() != 1 {
		t.Fatal("the default zone is not the filter's name")
	}
}

func TestIPLimitIPv6Prefix(t *testing.T) {
	env, clk := newEnv()
	c := mustBuild(t, env, "type: ip_limit\nrate: 1r/s\nipv6_prefix: 64\n")
	if v := request(c, clk, "2001:db8:1:2::1"); v.Reject != nil {
		t.Fatal("first rejected")
	}
	if v := request(c, clk, "2001:db8:1:2::2"); v.Reject == nil {
		t.Fatal("the same /64 is one client")
	}
	if v := request(c, clk, "2001:db8:1:3::1"); v.Reject != nil {
		t.Fatal("another /64 is another client")
	}
}

func TestIPLimitErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"type: ip_limit\n", `[0].rate: is required`},
		{"type: ip_limit\nrate: 10r/h\n", `[0].rate (line 2): invalid rate "10r/h": the unit must be "r/s" or "r/m"`},
		{"type: ip_limit\nrate: [1]\n", `[0].rate (line 2):`},
		{"type: ip_limit\nrate: 1r/s\nburst: -1\n", "[0].burst: must be between 0 and 1000000"},
		{"type: ip_limit\nrate: 1r/s\nnodelay: true\ndelay: 2\n", "[0].delay: conflicts with nodelay"},
		{"type: ip_limit\nrate: 1r/s\ndelay: -2\n", "[0].delay: must not be negative"},
		{"type: ip_limit\nrate: 1r/s\nstatus: 302\n", "[0].status: must be a 4xx or 5xx status, got 302"},
		{"type: ip_limit\nrate: 1r/s\nmax_keys: 0\n", "[0].max_keys: must be between 1"},
		{"type: ip_limit\nrate: 1r/s\nbrust: 2\n", `[0].brust (line 3): unknown key (did you mean "burst"?)`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, errs := Build(specsOf(t, tc.yaml), nil)
			if errs == nil || !strings.Contains(errs.Error(), tc.want) {
				t.Fatalf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
}

func TestIPLimitStatus(t *testing.T) {
	env, clk := newEnv()
	c := mustBuild(t, env, "type: ip_limit\nrate: 1r/s\nstatus: 503\n")
	request(c, clk, client)
	if v := request(c, clk, client); v.Reject == nil || v.Reject.Status != 503 {
		t.Fatalf("%+v, want 503", v)
	}
}

// Params may be nil when conf hands over a spec it built itself.
func TestIPLimitNilParams(t *testing.T) {
	_, errs := Build([]Spec{{Type: "ip_limit", Enabled: true}}, nil)
	if errs == nil || !strings.Contains(errs.Error(), "[0].rate: is required") {
		t.Fatalf("errors = %v", errs)
	}
}

func BenchmarkIPLimit(b *testing.B) {
	env, clk := newEnv()
	c := mustBuild(b, env, "type: ip_limit\nrate: 10r/s\nburst: 20\nnodelay: true\n")
	ips := make([]netip.Addr, 1<<16)
	for i := range ips {
		ips[i] = netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
	}
	var r Request
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		r.ClientIP, r.NowNano = ips[i&(len(ips)-1)], clk.now+int64(i)*1000
		c.Run(&r)
	}
}

// A request without a client address (not over TCP) is limited under the
// all-zero key rather than escaping the limit.
func TestIPLimitNoAddress(t *testing.T) {
	env, clk := newEnv()
	c := mustBuild(t, env, "type: ip_limit\nrate: 1r/s\n", "type: conn_limit\nmax: 1\n")
	r1 := Request{Call: api.Call{NowNano: clk.now}}
	if v := c.Run(&r1); v.Reject != nil {
		t.Fatal("first rejected")
	}
	r2 := Request{Call: api.Call{NowNano: clk.now}}
	if v := c.Run(&r2); v.Reject == nil {
		t.Fatal("second passed")
	}
	r1.Finish()
	r2.Finish()
	if n := env.Zones.Conns("conn_limit").Len(); n != 0 {
		t.Fatalf("%d conn keys left", n)
	}
}

// Compile is the reusable entry point for limits keyed by something else.
func TestLimitConfigCompileForOtherKeys(t *testing.T) {
	cfg := DefaultLimitConfig()
	cfg.Rate = rate(t, "2r/s")
	rl, errs := cfg.Compile(nil, "user_limit")
	if errs != nil {
		t.Fatal(errs)
	}
	uid := KeyFromBytes([]byte("u-42"))
	if v := rl.Check(uid, t0); v.Reject != nil {
		t.Fatal("first rejected")
	}
	if v := rl.Check(uid, t0); v.Reject == nil || v.RetryAfter != 1 {
		t.Fatalf("%+v, want rejection with Retry-After 1", v)
	}
	if v := rl.Check(KeyFromBytes([]byte("u-43")), t0); v.Reject != nil {
		t.Fatal("another user limited")
	}
}
