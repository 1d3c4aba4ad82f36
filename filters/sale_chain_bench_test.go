package filters

import (
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/sale/api"
	"flashgate/sale/catalog"
	"flashgate/sale/session"
)

// shopperChainYAML is the API chain of conf/edge.yaml, in its order.
var shopperChainYAML = []string{
	"type: access\nscope: all\nrules:\n  - \"allow all\"\n",
	"type: ip_limit\nrate: 20r/s\nburst: 40\nnodelay: true\n",
	"type: conn_limit\nmax: 20\n",
	"type: session\n",
	"type: sale_window\n",
	"type: sold_out\n",
	saleUserLimitYAML,
	"type: purchase_token\n",
}

// shopperBench drives `POST /api/seckill/do` with a valid Bearer JWT through
// RealIP and the shopper chain, rotating over many client addresses and
// users, the way the proxy does it: one pooled Request, Finish and Reset
// after each call. The sale fields are set as sale.Parse leaves them.
type shopperBench struct {
	ri      *RealIP
	chain   *Chain
	ctx     *fasthttp.RequestCtx
	now     int64
	step    int64
	peers   []net.Addr
	auth    [][]byte // "Bearer <jwt>" per user
	tokens  [][]byte // a purchase token of p1 per user
	product []byte
	want    *api.Rejection // nil: every call must pass
	r       Request
	i       int
}

const (
	benchPeers = 1 << 16
	benchUsers = 1 << 12
)

// newShopperBench: soldOut flags p1 so that the chain answers 410 at
// sold_out; otherwise every filter passes and the call would go to Redis.
func newShopperBench(t testing.TB, soldOut bool) *shopperBench {
	f := newSaleFixture(t)
	// Sessions and the sale outlast any benchmark run at 1 ms of clock per call.
	var err error
	if f.codec, err = session.NewCodec([][]byte{saleSecret}, 1000*time.Hour); err != nil {
		t.Fatal(err)
	}
	f.env.Sessions = f.codec
	f.reg.Put(&catalog.Sale{ProductID: "p1", Name: "thing", Stock: 10, Limit: 2, StartMs: saleNowMs - 60_000, EndMs: saleNowMs + 10_000_000_000})
	e := &shopperBench{
		ri:    mustRealIP(t, "", "127.0.0.1/32", "::1/128"),
		chain: mustBuild(t, f.env, shopperChainYAML...),
		now:   f.clk.now,
		// A user returns every 1.23 s (50r/m refills one request in 1.2 s),
		// an address every 20 s: no limit bites.
		step:    int64(300 * time.Microsecond),
		product: []byte("p1"),
	}
	for i := range benchPeers {
		e.peers = append(e.peers, &net.TCPAddr{IP: net.IPv4(100, 64+byte(i>>16), byte(i>>8), byte(i)), Port: 40000 + i%1000})
	}
	exp := f.clk.now/1e6 + 10_000_000_000
	for i := range benchUsers {
		user := "shopper-" + strconv.Itoa(i)
		e.auth = append(e.auth, []byte("Bearer "+f.jwt(t, f.codec, user, 0)))
		e.tokens = append(e.tokens, f.mint.Mint(nil, []byte(user), e.product, exp))
	}
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("/api/seckill/do")
	req.SetBodyString(`{"productId":"p1","token":"x","quantity":1}`)
	e.ctx = new(fasthttp.RequestCtx)
	e.ctx.Init(&req, e.peers[0], nil)
	if soldOut {
		f.reg.StateOf("p1").SetSoldOut(true)
		v := e.one()
		if v.Reject == nil || v.Reject.Code != "SOLD_OUT" {
			t.Fatalf("first call: %+v, want SOLD_OUT", v)
		}
		e.want = v.Reject
	}
	return e
}

// one is the proxy's work for one call around the chain.
func (e *shopperBench) one() Verdict {
	e.i++
	u := e.i & (benchUsers - 1)
	e.ctx.SetRemoteAddr(e.peers[e.i&(benchPeers-1)])
	e.ctx.Request.Header.SetBytesV(fasthttp.HeaderAuthorization, e.auth[u])
	r := &e.r
	r.Ctx = e.ctx
	r.ClientIP = e.ri.Resolve(e.ctx)
	r.NowNano = e.now + int64(e.i)*e.step
	// As sale.Parse leaves a `do` call.
	r.Endpoint = api.EndpointDo
	r.ProductID = e.product
	r.Token = e.tokens[u]
	r.Qty = 1
	v := e.chain.Run(r)
	r.Finish()
	r.Reset()
	return v
}

func (e *shopperBench) check(tb testing.TB, v Verdict) {
	if v.Reject != e.want {
		got := "pass"
		if v.Reject != nil {
			got = v.Reject.Code
		}
		tb.Fatalf("call %d: %s, want %v", e.i, got, e.want)
	}
}

// warm runs every address and user through so limiter tables have their
// size and pools are filled.
func (e *shopperBench) warm(tb testing.TB) {
	for range 2 * benchPeers {
		e.check(tb, e.one())
	}
}

func TestShopperChainAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops entries under the race detector")
	}
	for _, tc := range []struct {
		name    string
		soldOut bool
	}{{"rejected at sold_out", true}, {"passes up to Redis", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newShopperBench(t, tc.soldOut)
			e.warm(t)
			var bad Verdict
			wrong := false
			if n := testing.AllocsPerRun(10000, func() {
				if v := e.one(); v.Reject != e.want {
					bad, wrong = v, true
				}
			}); n != 0 {
				t.Fatalf("%v allocations per call", n)
			}
			if wrong {
				e.check(t, bad)
			}
		})
	}
}

// BUG (amortized allocations on the pass path): testing.AllocsPerRun
// divides with integer division, so an allocation every few dozen calls
// reads as 0. Counted over all runs, the rejection path allocates nothing,
// but the pass path allocates ~0.05 times and ~17 B per call, from two places:
//   - BoughtCache.Get is ristretto's Cache.Get, which records every key in
//     a ring stripe and replaces a full stripe (64 keys) with a new 512-byte
//     slice (ristretto ring.go, ringStripe.Push): ~1/64 per call.
//   - user_limit's zones: a user's entry is idle again 200 ms (5r/s) or
//     1.2 s (50r/m) after a pass, so when a shard's table fills, the sweep
//     in limShard.insert drops nearly everything and shrinks the table
//     (table.shrink), which the next inserts grow again (table.grow): a
//     shrink/grow cycle per shard, ~1/30 per call, under steady traffic.
func TestShopperChainNoAmortizedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops entries under the race detector")
	}
	for _, tc := range []struct {
		name    string
		soldOut bool
	}{{"rejected at sold_out", true}, {"passes up to Redis", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newShopperBench(t, tc.soldOut)
			e.warm(t)
			// MemStats count the whole process: a GC emptying sync.Pools or
			// the test framework's own goroutines add an allocation now and
			// then (~1 window in 20). An amortized allocation on the path
			// (the BUG above: ~500 per window) shows in every window, so
			// the best of three must be 0.
			const runs, windows = 10000, 3
			best, bytes := uint64(1<<63), uint64(0)
			for range windows {
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for range runs {
					e.one()
				}
				runtime.ReadMemStats(&after)
				if n := after.Mallocs - before.Mallocs; n < best {
					best, bytes = n, after.TotalAlloc-before.TotalAlloc
				}
			}
			if best != 0 {
				t.Fatalf("%d allocations (%d bytes) in %d calls, the fewest of %d windows", best, bytes, runs, windows)
			}
		})
	}
}

// BenchmarkSoldOutRejection: a `do` for a sold-out product from 65536
// addresses and 4096 signed-in users: RealIP, access, ip_limit, conn_limit,
// session (JWT HS256 verify), sale_window, sold_out answers 410.
func BenchmarkSoldOutRejection(b *testing.B) {
	e := newShopperBench(b, true)
	e.warm(b)
	b.ReportAllocs()
	for b.Loop() {
		if v := e.one(); v.Reject != e.want {
			e.check(b, v)
		}
	}
}

// BenchmarkShopperChainPass: the same call while p1 is on sale: every filter
// passes (user_limit, purchase_token too); what remains is the Redis call.
func BenchmarkShopperChainPass(b *testing.B) {
	e := newShopperBench(b, false)
	e.warm(b)
	b.ReportAllocs()
	for b.Loop() {
		if v := e.one(); v.Reject != nil {
			e.check(b, v)
		}
	}
}
