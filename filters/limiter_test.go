package filters

import (
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// t0 is an arbitrary wall-clock instant; tests move time by hand.
const t0 = int64(1_750_000_000) * int64(time.Second)

func rate(t testing.TB, s string) Rate {
	t.Helper()
	r, err := ParseRate(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var keyA = KeyFromAddr(netip.MustParseAddr("198.51.100.1"))

type step struct {
	at    time.Duration // since t0
	ok    bool
	delay time.Duration // the delay on a pass, the wait on a rejection
}

func runSteps(t *testing.T, l *Limiter, lim Limit, steps []step) {
	t.Helper()
	for i, s := range steps {
		ok, d := l.Take(keyA, t0+int64(s.at), lim)
		if ok != s.ok || d != s.delay {
			t.Fatalf("request %d at +%v: got ok=%v d=%v, want ok=%v d=%v", i+1, s.at, ok, d, s.ok, s.delay)
		}
	}
}

// The nginx arithmetic of burst: a key seen for the first time passes with
// excess 0; every request that arrives with no time elapsed adds 1000; a
// request is rejected when its excess would exceed burst*1000. With burst=5
// the simultaneous requests 1..6 pass with excess 0, 1000, ..., 5000 and the
// 7th (6000 > 5000) is rejected: burst+1 requests pass at once, not burst.
// (nginx's own article: "burst=20 nodelay ... 21 requests arrive
// simultaneously, NGINX forwards all 21 immediately".)
func TestLimiterBurstNodelay(t *testing.T) {
	lim := Limit{Rate: rate(t, "1r/s"), Burst: 5, Delay: 5}
	var steps []step
	for range 6 {
		steps = append(steps, step{0, true, 0})
	}
	steps = append(steps,
		step{0, false, time.Second},                           // 7th: 6000 > 5000, one token is a second away
		step{999 * time.Millisecond, false, time.Millisecond}, // rejections leave the state alone
		step{time.Second, true, 0},                            // one token back: 5000-1000+1000 = 5000 passes
		step{time.Second, false, time.Second},
		step{3 * time.Second, true, 0}, // two seconds give two more
		step{3 * time.Second, true, 0},
		step{3 * time.Second, false, time.Second},
	)
	runSteps(t, NewLimiter(0), lim, steps)
}

func TestLimiterBurstZero(t *testing.T) {
	lim := Limit{Rate: rate(t, "10r/s")}
	runSteps(t, NewLimiter(0), lim, []step{
		{0, true, 0},
		{0, false, 100 * time.Millisecond},
		{50 * time.Millisecond, false, 50 * time.Millisecond},
		{100 * time.Millisecond, true, 0},
		{150 * time.Millisecond, false, 50 * time.Millisecond},
		{10 * time.Second, true, 0},
	})
}

// 30r/m is nginx's 500 milli-requests per second: one request per 2 s.
func TestLimiterPerMinute(t *testing.T) {
	lim := Limit{Rate: rate(t, "30r/m")}
	runSteps(t, NewLimiter(0), lim, []step{
		{0, true, 0},
		{0, false, 2 * time.Second},
		{1999 * time.Millisecond, false, time.Millisecond},
		{2 * time.Second, true, 0},
		{3 * time.Second, false, time.Second},
	})
	// 1r/m is 16 milli-requests per second in nginx (1000/60 truncated), so
	// a token takes 62.5 s, not 60.
	lim = Limit{Rate: rate(t, "1r/m")}
	runSteps(t, NewLimiter(0), lim, []step{
		{0, true, 0},
		{60 * time.Second, false, 2500 * time.Millisecond},
		{62500 * time.Millisecond, true, 0},
	})
}

// Without nodelay every request above the rate waits for its turn: the
// delay is excess/rate.
func TestLimiterDelays(t *testing.T) {
	lim := Limit{Rate: rate(t, "1r/s"), Burst: 5}
	runSteps(t, NewLimiter(0), lim, []step{
		{0, true, 0},
		{0, true, 1 * time.Second},
		{0, true, 2 * time.Second},
		{0, true, 3 * time.Second},
		{0, true, 4 * time.Second},
		{0, true, 5 * time.Second},
		{0, false, time.Second},
		{500 * time.Millisecond, false, 500 * time.Millisecond}, // 5000-500+1000 = 5500 > 5000
		{time.Second, true, 5 * time.Second},                    // 5000-1000+1000 = 5000
	})
}

// delay= (two-stage limiting): the first Delay requests of the burst pass at
// once, the rest of the burst is delayed by (excess-delay)/rate. With
// burst=5 delay=3 at once: excess 0..3000 pass (4 requests), 4000 and 5000
// wait 1 s and 2 s, the 7th is rejected.
func TestLimiterTwoStage(t *testing.T) {
	lim := Limit{Rate: rate(t, "1r/s"), Burst: 5, Delay: 3}
	runSteps(t, NewLimiter(0), lim, []step{
		{0, true, 0},
		{0, true, 0},
		{0, true, 0},
		{0, true, 0},
		{0, true, time.Second},
		{0, true, 2 * time.Second},
		{0, false, time.Second},
	})
}

// nginx counts a small step back of the clock as no time, and one of more
// than a minute as 1 ms; it must never corrupt the state.
func TestLimiterClockBack(t *testing.T) {
	lim := Limit{Rate: rate(t, "1r/s"), Burst: 1, Delay: 1}
	runSteps(t, NewLimiter(0), lim, []step{
		{10 * time.Minute, true, 0},
		{10*time.Minute - time.Second, true, 0}, // counts as no time: 0+1000
		{10*time.Minute - 2*time.Second, false, time.Second},
		{0, false, 999 * time.Millisecond}, // -10 min counts as 1 ms
		{10*time.Minute + time.Second, true, 0},
	})
}

func TestLimiterManyKeysIndependent(t *testing.T) {
	l := NewLimiter(0)
	lim := Limit{Rate: rate(t, "1r/s")}
	for i := range 10000 {
		k := KeyFromAddr(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
		if ok, _ := l.Take(k, t0, lim); !ok {
			t.Fatalf("key %d: first request rejected", i)
		}
		if ok, _ := l.Take(k, t0, lim); ok {
			t.Fatalf("key %d: second request passed", i)
		}
	}
	if n := l.Len(); n != 10000 {
		t.Fatalf("Len = %d, want 10000", n)
	}
}

// Idle entries (whose excess has decayed so far that they compute as a new
// key would) are dropped by the per-minute sweep, without a goroutine.
func TestLimiterSweepsIdle(t *testing.T) {
	l := NewLimiter(0)
	lim := Limit{Rate: rate(t, "1r/s"), Burst: 10, Delay: 10}
	for i := range 5000 {
		k := KeyFromAddr(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
		for range 3 {
			l.Take(k, t0, lim)
		}
	}
	// 2000 milli of excess + 1000 decays in 3 s at 1r/s; a shard sweeps on
	// its first Take a minute after its previous sweep.
	later := t0 + int64(61*time.Second)
	for i := range 20000 {
		k := KeyFromAddr(netip.AddrFrom4([4]byte{11, 0, byte(i >> 8), byte(i)}))
		l.Take(k, later, lim)
	}
	// Every shard has seen a Take by now: 20000 keys over 256 shards leave
	// one out with probability 256*(255/256)^20000, about 1e-32.
	if n := l.Len(); n != 20000 {
		t.Fatalf("Len = %d after the sweep, want the 20000 fresh keys", n)
	}
	if l.Evicted() != 0 {
		t.Fatalf("Evicted = %d, want 0 (nothing was full)", l.Evicted())
	}
}

// A zone never holds more than its bound; when full it evicts.
func TestLimiterBounded(t *testing.T) {
	l := NewLimiter(100)
	lim := Limit{Rate: rate(t, "1r/s"), Burst: 10, Delay: 10}
	for i := range 1000 {
		k := KeyFromAddr(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
		if ok, _ := l.Take(k, t0+int64(i)*int64(time.Millisecond), lim); !ok {
			t.Fatalf("new key %d rejected", i)
		}
	}
	if n := l.Len(); n != 100 {
		t.Fatalf("Len = %d, want 100", n)
	}
	if l.Evicted() == 0 {
		t.Fatal("no eviction counted")
	}
	// Lowering the bound (a reload) takes effect as keys arrive.
	l.SetMaxKeys(50)
	for i := range 100 {
		k := KeyFromAddr(netip.AddrFrom4([4]byte{11, 0, byte(i >> 8), byte(i)}))
		l.Take(k, t0+int64(2*time.Second), lim)
	}
	if n := l.Len(); n != 50 {
		t.Fatalf("Len = %d after SetMaxKeys(50)", n)
	}
}

// Eviction prefers idle entries, then the least recently used.
func TestLimiterEvictsLRU(t *testing.T) {
	l := NewLimiter(4) // one shard of four keys
	lim := Limit{Rate: rate(t, "1r/s"), Burst: 100, Delay: 100}
	keys := make([][16]byte, 5)
	for i := range keys {
		keys[i] = KeyFromAddr(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}))
	}
	ms := func(n int) int64 { return t0 + int64(n)*int64(time.Millisecond) }
	for i := range 4 {
		for range 5 {
			l.Take(keys[i], ms(i), lim) // excess 4000: far from idle
		}
	}
	l.Take(keys[0], ms(10), lim) // key 1 is now the least recently used
	l.Take(keys[4], ms(11), lim)
	if n := l.Len(); n != 4 {
		t.Fatalf("Len = %d", n)
	}
	if excessOf(l, keys[1]) >= 0 {
		t.Fatal("key 1 (least recently used) was not evicted")
	}
	for _, k := range []int{0, 2, 3} {
		if e := excessOf(l, keys[k]); e < 4000 {
			t.Fatalf("key %d lost its state (excess %d)", k, e)
		}
	}
	// Now make key 2 idle: at 1r/s, 4000+1000 milli decay in 5 s. It goes
	// before key 4, which is older in nothing but is not idle.
	for i := range 4 {
		if i != 2 {
			l.Take(keys[[]int{0, 3, 4, 4}[i]], ms(5100), lim)
		}
	}
	l.Take(keys[1], ms(5100), lim)
	if excessOf(l, keys[2]) >= 0 || excessOf(l, keys[1]) < 0 {
		t.Fatal("the idle key was not the one evicted")
	}
}

// excessOf is a key's stored excess, or -1 if it is not tracked.
func excessOf(l *Limiter, k [16]byte) int {
	for i := range l.shards {
		s := &l.shards[i]
		if s.t.slots == nil {
			continue
		}
		if j, ok := s.t.find(&k, s.t.hash(&k)); ok {
			return int(s.t.slots[j].b)
		}
	}
	return -1
}

// Entries store 32-bit milliseconds from a moving base; a key touched just
// before the base moves must keep its exact elapsed time.
func TestLimiterRebase(t *testing.T) {
	l := NewLimiter(100) // one shard
	lim := Limit{Rate: rate(t, "1r/s")}
	other := KeyFromAddr(netip.MustParseAddr("203.0.113.9"))
	l.Take(other, t0, lim) // sets the base
	base := l.shards[0].base
	near := t0 + int64(rebaseAtMs-10)*int64(time.Millisecond)
	if ok, _ := l.Take(keyA, near, lim); !ok {
		t.Fatal("first request rejected")
	}
	l.Take(other, near+int64(20*time.Millisecond), lim) // moves the base
	if l.shards[0].base == base {
		t.Fatal("base did not move")
	}
	ok, d := l.Take(keyA, near+int64(25*time.Millisecond), lim)
	if ok || d != 975*time.Millisecond {
		t.Fatalf("after rebase: ok=%v d=%v, want rejection with 975ms to wait", ok, d)
	}
	// A silence longer than the 32-bit range reads as idle.
	if ok, _ := l.Take(keyA, near+int64(100*24*time.Hour), lim); !ok {
		t.Fatal("key idle for 100 days rejected")
	}
}

// Out-of-range limits from code (not config) are clamped, never overflow.
func TestLimiterClamps(t *testing.T) {
	l := NewLimiter(0)
	lim := Limit{Rate: Rate{Milli: 1 << 62}, Burst: 1 << 40, Delay: -5}
	for range 3 {
		if ok, _ := l.Take(keyA, t0, lim); !ok {
			t.Fatal("rejected under a huge burst")
		}
	}
	if ok, _ := l.Take(keyA, t0, Limit{}); ok {
		t.Fatal("the zero Limit (rate clamped to 1 milli-request/s, burst 0) passed a second request")
	}
}

// Simultaneous requests on several goroutines: exactly burst+1 pass.
func TestLimiterConcurrent(t *testing.T) {
	l := NewLimiter(0)
	lim := Limit{Rate: rate(t, "1r/s"), Burst: 99, Delay: 99}
	var passed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if ok, _ := l.Take(keyA, t0, lim); ok {
					passed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if passed.Load() != 100 {
		t.Fatalf("%d passed, want 100", passed.Load())
	}
}

func TestLimiterTakeAllocs(t *testing.T) {
	lim := Limit{Rate: rate(t, "10r/s"), Burst: 5}
	l := NewLimiter(0)
	for j := range 1024 {
		l.Take(KeyFromAddr(netip.AddrFrom4([4]byte{10, 0, byte(j >> 8), byte(j)})), t0, lim)
	}
	j := 0
	if n := testing.AllocsPerRun(10000, func() {
		j++
		l.Take(KeyFromAddr(netip.AddrFrom4([4]byte{10, 0, byte(j >> 8 & 3), byte(j)})), t0+int64(j)*1000, lim)
	}); n != 0 {
		t.Fatalf("Take on known keys allocates %v times per run", n)
	}
	// New keys allocate only when a shard's table grows: amortized ~0.
	i := 0
	if n := testing.AllocsPerRun(100000, func() {
		i++
		l.Take(KeyFromAddr(netip.AddrFrom4([4]byte{11, byte(i >> 16), byte(i >> 8), byte(i)})), t0+int64(i)*1000, lim)
	}); n > 0.01 {
		t.Fatalf("Take with new keys allocates %v times per run", n)
	}
}

// The zone's memory: 1,000,000 distinct IPv4 clients must cost at most 64
// bytes each. Memory is deterministic, so this is a test, not a benchmark.
func TestLimiterMemoryPerKey(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts a million keys")
	}
	const n = 1_000_000
	lim := Limit{Rate: rate(t, "10r/s"), Burst: 20}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := NewLimiter(2 * n)
	for i := range n {
		k := KeyFromAddr(netip.AddrFrom4([4]byte{byte(1 + i>>24), byte(i >> 16), byte(i >> 8), byte(i)}))
		l.Take(k, t0, lim) // all at once: none is idle, so none is reclaimed
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := l.Len(); got != n {
		t.Fatalf("Len = %d, want %d", got, n)
	}
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.1f bytes per key (%d keys, %.1f MB)", perKey, n, float64(after.HeapAlloc-before.HeapAlloc)/1e6)
	if perKey > 64 {
		t.Fatalf("%.1f bytes per key, want <= 64", perKey)
	}
	runtime.KeepAlive(l)
}

func TestShardSizes(t *testing.T) {
	if s := unsafe.Sizeof(limShard{}); s != 128 {
		t.Fatalf("limShard is %d bytes, want 128 (fix the padding)", s)
	}
	if s := unsafe.Sizeof(slot{}); s != 24 {
		t.Fatalf("slot is %d bytes, want 24", s)
	}
}

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in    string
		milli int64
		err   bool
	}{
		{"10r/s", 10000, false},
		{"1r/s", 1000, false},
		{"600r/m", 10000, false},
		{"30r/m", 500, false},
		{"1r/m", 16, false},
		{"1000000r/s", 1e9, false},
		{"1000001r/s", 0, true},
		{"60000000r/m", 1e9, false},
		{"0r/s", 0, true},
		{"010r/s", 0, true},
		{"10", 0, true},
		{"10r/h", 0, true},
		{"10 r/s", 0, true},
		{" 10r/s", 0, true},
		{"-1r/s", 0, true},
		{"1.5r/s", 0, true},
		{"99999999999999999999r/s", 0, true},
		{"", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			r, err := ParseRate(tc.in)
			if (err != nil) != tc.err || r.Milli != tc.milli {
				t.Fatalf("ParseRate(%q) = %+v, %v", tc.in, r, err)
			}
			if err == nil && r.String() != tc.in {
				t.Fatalf("String() = %q", r.String())
			}
		})
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"10r/s", "600r/m", "0r/s", "1r/m", "9999999999r/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			return
		}
		if r.Milli < 16 || r.Milli > MaxRatePerSecond*1000 {
			t.Fatalf("ParseRate(%q).Milli = %d out of range", s, r.Milli)
		}
		if r.String() != s {
			t.Fatalf("ParseRate(%q).String() = %q", s, r.String())
		}
	})
}

func TestKeyFromBytesAllocs(t *testing.T) {
	u := []byte("user-1")
	if n := testing.AllocsPerRun(100, func() { KeyFromBytes(u) }); n != 0 {
		t.Fatalf("KeyFromBytes allocates %v", n)
	}
}

func TestKeys(t *testing.T) {
	v4 := netip.MustParseAddr("1.2.3.4")
	if KeyFromAddr(v4) != KeyFromAddr(netip.MustParseAddr("::ffff:1.2.3.4")) {
		t.Fatal("IPv4 and its mapped form must share a key")
	}
	a, b := KeyFromBytes([]byte("user-1")), KeyFromBytes([]byte("user-2"))
	if a == b || a != KeyFromBytes([]byte("user-1")) {
		t.Fatal("KeyFromBytes is not a function of its input")
	}
	for _, tc := range []struct {
		addr string
		bits int
		want string
	}{
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::"},
		{"2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6"},
		{"2001:db8:1:2:3:4:5:6", 60, "2001:db8:1::"},
		{"2001:db8:1:ff:3:4:5:6", 60, "2001:db8:1:f0::"},
		{"1.2.3.4", 64, "::ffff:1.2.3.4"},
	} {
		got := netip.AddrFrom16(keyFromAddrPrefix(netip.MustParseAddr(tc.addr), tc.bits))
		if got.String() != tc.want {
			t.Errorf("keyFromAddrPrefix(%s, %d) = %v, want %s", tc.addr, tc.bits, got, tc.want)
		}
	}
}

func BenchmarkLimiterTake(b *testing.B) {
	l := NewLimiter(0)
	lim := Limit{Rate: rate(b, "10r/s"), Burst: 20}
	keys := make([][16]byte, 1<<16)
	for i := range keys {
		keys[i] = KeyFromAddr(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		l.Take(keys[i&(len(keys)-1)], t0+int64(i)*1000, lim)
	}
}

func BenchmarkLimiterTakeParallel(b *testing.B) {
	l := NewLimiter(0)
	lim := Limit{Rate: rate(b, "10r/s"), Burst: 20}
	var seq atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		base := seq.Add(1) << 16
		i := int64(0)
		for pb.Next() {
			i++
			v := base + i&0xffff
			k := KeyFromAddr(netip.AddrFrom4([4]byte{10, byte(v >> 16), byte(v >> 8), byte(v)}))
			l.Take(k, t0+i*1000, lim)
		}
	})
}
