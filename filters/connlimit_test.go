package filters

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"unsafe"

	"flashgate/sale/api"
)

func TestConnLimit(t *testing.T) {
	env, clk := newEnv()
	c := mustBuild(t, env, "type: conn_limit\nmax: 2\n")
	ip := netip.MustParseAddr("198.51.100.1")
	var rs [3]Request
	for i := range rs {
		rs[i] = Request{Call: api.Call{ClientIP: ip, NowNano: clk.now}}
	}
	if v := c.Run(&rs[0]); v.Reject != nil {
		t.Fatal("1st rejected")
	}
	if v := c.Run(&rs[1]); v.Reject != nil {
		t.Fatal("2nd rejected")
	}
	v := c.Run(&rs[2])
	if v.Reject == nil || v.Reject.Status != 429 || v.Reject.Code != "RATE_LIMITED" || v.RetryAfter != 1 {
		t.Fatalf("3rd: %+v, want 429 RATE_LIMITED with Retry-After 1", v)
	}
	// Another client is not affected.
	other := Request{Call: api.Call{ClientIP: netip.MustParseAddr("198.51.100.2"), NowNano: clk.now}}
	if v := c.Run(&other); v.Reject != nil {
		t.Fatal("other client rejected")
	}
	other.Finish()
	rs[2].Finish() // rejected: held nothing, releases nothing
	zone := env.Zones.Conns("conn_limit")
	if n := zone.Count(KeyFromAddr(ip)); n != 2 {
		t.Fatalf("count = %d, want 2", n)
	}
	rs[0].Finish()
	if v := c.Run(&rs[2]); v.Reject != nil {
		t.Fatal("a slot was released but the request is still rejected")
	}
	rs[1].Finish()
	rs[2].Finish()
	if n := zone.Len(); n != 0 {
		t.Fatalf("%d keys left at zero in flight, want none (memory must follow requests)", n)
	}
}

// A reload keeps the counts of requests still in flight: they finish on the
// old chain's filter and release in the same zone.
func TestConnLimitReload(t *testing.T) {
	env, clk := newEnv()
	old := mustBuild(t, env, "type: conn_limit\nmax: 1\n")
	r := Request{Call: api.Call{ClientIP: netip.MustParseAddr("198.51.100.1"), NowNano: clk.now}}
	old.Run(&r)
	next := mustBuild(t, env, "type: conn_limit\nmax: 1\n")
	if v := request(next, clk, "198.51.100.1"); v.Reject == nil {
		t.Fatal("the new chain does not see the in-flight request")
	}
	r.Finish()
	if v := request(next, clk, "198.51.100.1"); v.Reject != nil {
		t.Fatal("the slot released on the old chain is still taken")
	}
}

func TestConnLimitErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"type: conn_limit\n", "[0].max: must be at least 1"},
		{"type: conn_limit\nmax: 1\nstatus: 200\n", "[0].status: must be a 4xx or 5xx status"},
		{"type: conn_limit\nmax: 1\nmaxx: 2\n", `[0].maxx (line 3): unknown key (did you mean "max"?)`},
		{"type: conn_limit\nmax: x\n", `[0].max (line 2): cannot use "x" as int`},
		{"type: conn_limit\nmax: 1\nipv6_prefix: 8\n", "[0].ipv6_prefix: must be between 16 and 128"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, errs := Build(specsOf(t, tc.yaml), nil)
			if errs == nil || !strings.Contains(errs.Error(), tc.want) {
				t.Fatalf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
}

func TestConnShardSize(t *testing.T) {
	if s := unsafe.Sizeof(connShard{}); s != 128 {
		t.Fatalf("connShard is %d bytes, want 128 (fix the padding)", s)
	}
}

func BenchmarkConnLimit(b *testing.B) {
	env, clk := newEnv()
	c := mustBuild(b, env, "type: conn_limit\nmax: 4\n")
	ips := make([]netip.Addr, 4096)
	for i := range ips {
		ips[i] = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
	}
	var r Request
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		r.ClientIP, r.NowNano = ips[i&4095], clk.now
		c.Run(&r)
		r.Finish()
	}
}

// The table against a map, with random inserts and deletes on small tables
// so that clusters wrap around the end and tables grow and shrink.
func TestTableModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	z := NewConnZone()
	model := map[[16]byte]int{}
	keys := make([][16]byte, 2000)
	for i := range keys {
		keys[i] = KeyFromBytes(fmt.Appendf(nil, "k%d", i))
	}
	for op := range 300000 {
		// Phases of mostly-acquire and mostly-release make the tables grow
		// and shrink.
		k := keys[rng.IntN(len(keys))]
		if rng.IntN(100) < 30+40*(op/20000%2) {
			want := model[k] < 3
			if z.Acquire(k, 3) != want {
				t.Fatalf("op %d: Acquire disagrees with the model", op)
			}
			if want {
				model[k]++
			}
		} else if model[k] > 0 {
			z.Release(k)
			if model[k]--; model[k] == 0 {
				delete(model, k)
			}
		}
		if op%5000 == 0 {
			for _, k := range keys {
				if z.Count(k) != model[k] {
					t.Fatalf("op %d: Count = %d, model %d", op, z.Count(k), model[k])
				}
			}
			if z.Len() != len(model) {
				t.Fatalf("op %d: Len = %d, model %d", op, z.Len(), len(model))
			}
		}
	}
}

// ipv6_prefix groups the addresses of one network into one client; the
// default, 128, keeps every address its own, IPv4 and IPv4-mapped alike.
func TestConnLimitIPv6Prefix(t *testing.T) {
	for _, tc := range []struct {
		yaml  string
		same  []string // in flight together: the second is refused
		apart []string // in flight together: both pass
	}{
		{"type: conn_limit\nmax: 1\nipv6_prefix: 64\n",
			[]string{"2001:db8:1:2::1", "2001:db8:1:2:ffff::9"}, []string{"2001:db8:1:2::1", "2001:db8:1:3::1"}},
		{"type: conn_limit\nmax: 1\nipv6_prefix: 60\n",
			[]string{"2001:db8:1:10::1", "2001:db8:1:1f::1"}, []string{"2001:db8:1:10::1", "2001:db8:1:20::1"}},
		{"type: conn_limit\nmax: 1\n",
			[]string{"2001:db8::1", "2001:db8::1"}, []string{"2001:db8::1", "2001:db8::2"}},
		{"type: conn_limit\nmax: 1\nipv6_prefix: 64\n",
			[]string{"198.51.100.1", "198.51.100.1"}, []string{"198.51.100.1", "198.51.100.2"}},
		{"type: conn_limit\nmax: 1\n",
			[]string{"198.51.100.1", "198.51.100.1"}, []string{"198.51.100.1", "::ffff:198.51.100.2"}},
	} {
		t.Run(tc.yaml, func(t *testing.T) {
			env, clk := newEnv()
			c := mustBuild(t, env, tc.yaml)
			for _, pair := range []struct {
				addrs   []string
				refused bool
			}{{tc.same, true}, {tc.apart, false}} {
				var rs [2]Request
				for i, a := range pair.addrs {
					rs[i] = Request{Call: api.Call{ClientIP: netip.MustParseAddr(a), NowNano: clk.now}}
				}
				if v := c.Run(&rs[0]); v.Reject != nil {
					t.Fatalf("%s refused alone", pair.addrs[0])
				}
				if v := c.Run(&rs[1]); (v.Reject != nil) != pair.refused {
					t.Fatalf("%s beside %s: refused %v, want %v", pair.addrs[1], pair.addrs[0], v.Reject != nil, pair.refused)
				}
				rs[0].Finish()
				rs[1].Finish()
				if n := env.Zones.Conns("conn_limit").Len(); n != 0 {
					t.Fatalf("%d keys left after every request finished", n)
				}
			}
		})
	}
}
