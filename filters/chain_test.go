package filters

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/sale/api"
)

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs []string
		want  string
	}{
		{"unknown type", []string{"type: acces\n"}, `[0].type: unknown filter type "acces" (known types: access, conn_limit, ip_limit`},
		{"missing type", []string{"name: x\n"}, `[0].type: is required (known types: access,`},
		{"duplicate name", []string{"type: ip_limit\nrate: 1r/s\n", "type: ip_limit\nrate: 1r/m\n"}, `[1].name: "ip_limit" is also the name of filters[0]`},
		{"errors of every filter at once", []string{"type: ip_limit\n", "type: conn_limit\n"}, `[0].rate: is required, e.g. "10r/s" or "600r/m"; [1].max: must be at least 1`},
		{"a disabled filter is still checked", []string{"type: ip_limit\nenabled: false\nrate: fast\n"}, `[0].rate (line 3): invalid rate "fast"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := Build(specsOf(t, tc.specs...), nil)
			if errs == nil || !strings.Contains(errs.Error(), tc.want) {
				t.Fatalf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
	var many []Spec
	for i := range maxFinishers + 1 {
		many = append(many, specOf(t, fmt.Sprintf("type: conn_limit\nname: c%d\nmax: 1\n", i)))
	}
	if _, errs := Build(many, nil); errs == nil || !strings.Contains(errs.Error(), "at most 8 filters that hold a slot") {
		t.Fatalf("errors = %v", errs)
	}
}

func TestBuildNamesAndDisabled(t *testing.T) {
	env, _ := newEnv()
	c := mustBuild(t, env,
		"type: access\nrules: [\"deny 192.0.2.0/24\"]\n",
		"type: ip_limit\nname: burst\nrate: 100r/s\n",
		"type: ip_limit\nname: sustained\nrate: 600r/m\nenabled: false\n",
		"type: conn_limit\nmax: 4\ndry_run: true\nscope: all\n",
	)
	var got []string
	for _, e := range c.Entries() {
		got = append(got, fmt.Sprintf("%s/%s/%v", e.Name, e.Type, e.DryRun))
	}
	want := []string{"access/access/false", "burst/ip_limit/false", "conn_limit/conn_limit/true"}
	if !slices.Equal(got, want) || c.Len() != 3 {
		t.Fatalf("entries %v, want %v", got, want)
	}
	var nilChain *Chain
	if nilChain.Len() != 0 || nilChain.Run(&Request{}) != Pass {
		t.Fatal("a nil chain must pass everything")
	}
}

// A dry-run rejection is counted and the chain goes on; the first real
// rejection ends it, and later filters do not run.
func TestChainDryRunAndOrder(t *testing.T) {
	env, clk := newEnv()
	c := mustBuild(t, env,
		"type: access\nname: blocklist\ndry_run: true\nrules: [\"deny 198.51.100.0/24\"]\n",
		"type: ip_limit\nrate: 1r/s\n",
		"type: conn_limit\nmax: 1\n",
	)
	if v := request(c, clk, client); v.Reject != nil {
		t.Fatalf("dry-run rejection was enforced: %+v", v)
	}
	v := request(c, clk, client)
	if v.Reject == nil || v.Reject.Code != "RATE_LIMITED" {
		t.Fatalf("%+v, want ip_limit's rejection", v)
	}
	stats := map[string][3]uint64{}
	env.Zones.EachStats(func(name string, s *Stats) {
		stats[name] = [3]uint64{s.Passed.Load(), s.Rejected.Load(), s.DryRunRejected.Load()}
	})
	want := map[string][3]uint64{
		"blocklist":  {0, 0, 2},
		"ip_limit":   {1, 1, 0},
		"conn_limit": {1, 0, 0}, // did not run for the rejected request
	}
	if fmt.Sprint(stats) != fmt.Sprint(want) {
		t.Fatalf("stats %v, want %v", stats, want)
	}
	// Counters are keyed by name in Zones: a reload continues them.
	c = mustBuild(t, env,
		"type: access\nname: blocklist\nrules: [\"deny 198.51.100.0/24\"]\n",
	)
	if v := request(c, clk, client); v.Reject == nil || v.Reject.Status != 403 {
		t.Fatalf("%+v, want 403 now that dry_run is off", v)
	}
	if s := env.Zones.Stats("blocklist"); s.Rejected.Load() != 1 || s.DryRunRejected.Load() != 2 {
		t.Fatal("counters were reset by the reload")
	}
}

// Two limits delay the request by the longer of their delays, as nginx does
// with several limit_req: both booked the request at the same instant.
// A dry-run filter delays nothing.
func TestChainDelayIsTheLongest(t *testing.T) {
	env, clk := newEnv()
	c := mustBuild(t, env,
		"type: ip_limit\nname: a\nrate: 4r/s\nburst: 10\n",
		"type: ip_limit\nname: b\nrate: 2r/s\nburst: 10\n",
		"type: ip_limit\nname: c\nrate: 1r/s\nburst: 10\ndry_run: true\n",
	)
	request(c, clk, client)
	if v := request(c, clk, client); v.Delay != 500*time.Millisecond {
		t.Fatalf("delay %v, want 500ms (b's; a asks 250ms, dry-run c 1s)", v.Delay)
	}
}

func TestChainFillsNow(t *testing.T) {
	env, clk := newEnv()
	c := mustBuild(t, env, "type: ip_limit\nrate: 1r/s\n")
	r := Request{Call: api.Call{ClientIP: netip.MustParseAddr(client)}}
	c.Run(&r)
	if r.NowNano != clk.now {
		t.Fatalf("NowNano = %d, want the env clock's %d", r.NowNano, clk.now)
	}
}

func TestZonesEachStatsSorted(t *testing.T) {
	z := NewZones()
	for _, n := range []string{"b", "c", "a"} {
		z.Stats(n).Passed.Add(1)
	}
	var names []string
	z.EachStats(func(name string, s *Stats) { names = append(names, name) })
	if !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Fatalf("names %v", names)
	}
	if z.Stats("a") != z.Stats("a") || z.Limiter("x", 10) != z.Limiter("x", 10) || z.Conns("x") != z.Conns("x") {
		t.Fatal("zones are not reused by name")
	}
	var zero Zones // the zero value works
	zero.Stats("a")
	zero.Limiter("a", 0)
	zero.Conns("a")
	var ls []string
	z.EachLimiter(func(name string, l *Limiter) { ls = append(ls, name) })
	if !slices.Equal(ls, []string{"x"}) {
		t.Fatalf("limiters %v", ls)
	}
}

// edgeChain is the sale API's front: access, per-IP rate, per-IP
// concurrency, behind RealIP.
type edgeBench struct {
	ri    *RealIP
	chain *Chain
	ctx   *fasthttp.RequestCtx
	clk   *clock
	peers []net.Addr
	xff   [][]byte
	r     Request
	i     int
}

func newEdgeBench(t testing.TB, behindProxy bool) *edgeBench {
	env, clk := newEnv()
	e := &edgeBench{
		ri: mustRealIP(t, "", "10.0.0.0/8"),
		chain: mustBuild(t, env,
			"type: access\nrules: [\"deny 192.0.2.0/24\", \"deny 198.18.0.0/15\", \"deny 2001:db8:dead::/48\", \"allow all\"]\n",
			"type: ip_limit\nrate: 10r/s\nburst: 20\nnodelay: true\n",
			"type: conn_limit\nmax: 8\n",
		),
		clk: clk,
	}
	const n = 1 << 16
	for i := range n {
		ip := net.IPv4(100, 64+byte(i>>16), byte(i>>8), byte(i))
		if behindProxy {
			e.xff = append(e.xff, []byte(ip.String()+", 10.1.1.1"))
		} else {
			e.peers = append(e.peers, &net.TCPAddr{IP: ip, Port: 40000})
		}
	}
	e.ctx = newCtx("10.0.0.1", "X-Forwarded-For", "203.0.113.1")
	return e
}

// one is the work of the proxy per request around the chain.
func (e *edgeBench) one() Verdict {
	e.i++
	if e.peers != nil {
		e.ctx.SetRemoteAddr(e.peers[e.i&(len(e.peers)-1)])
	} else {
		e.ctx.Request.Header.SetBytesV("X-Forwarded-For", e.xff[e.i&(len(e.xff)-1)])
	}
	r := &e.r
	r.Ctx = e.ctx
	r.ClientIP = e.ri.Resolve(e.ctx)
	r.NowNano = e.clk.now + int64(e.i)*int64(time.Microsecond)
	v := e.chain.Run(r)
	r.Finish()
	r.Reset()
	return v
}

func TestChainAllocs(t *testing.T) {
	for _, behind := range []bool{false, true} {
		e := newEdgeBench(t, behind)
		for range 1 << 17 { // every key seen: tables at their size
			e.one()
		}
		if n := testing.AllocsPerRun(10000, func() { e.one() }); n != 0 {
			t.Fatalf("behind proxy %v: %v allocations per request", behind, n)
		}
	}
}

// BenchmarkChain: RealIP (untrusted peers) + access + ip_limit + conn_limit
// + Finish, 65536 distinct clients in turn.
func BenchmarkChain(b *testing.B) {
	e := newEdgeBench(b, false)
	b.ReportAllocs()
	for b.Loop() {
		e.one()
	}
}

// BenchmarkChainBehindProxy: the same behind a trusted load balancer, the
// client taken from X-Forwarded-For (the header Set is part of the cost).
func BenchmarkChainBehindProxy(b *testing.B) {
	e := newEdgeBench(b, true)
	b.ReportAllocs()
	for b.Loop() {
		e.one()
	}
}
