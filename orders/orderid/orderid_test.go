package orderid

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// base is a fixed instant well inside the id space; no test reads the wall clock.
var base = time.Date(2026, 11, 11, 0, 0, 0, 0, time.UTC).UnixMilli()

// clock is a settable test clock.
type clock struct{ ms atomic.Int64 }

func newClock(ms int64) *clock {
	c := &clock{}
	c.ms.Store(ms)
	return c
}

func (c *clock) now() int64 { return c.ms.Load() }

func mustGen(t testing.TB, node int, now func() int64) *Generator {
	t.Helper()
	g, err := NewGenerator(node, now)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func seq(id int64) int64 { return id & (1<<seqBits - 1) }

func TestNewGenerator(t *testing.T) {
	fixed := func(ms int64) func() int64 { return func() int64 { return ms } }
	tests := []struct {
		name string
		node int
		now  func() int64
		ok   bool
	}{
		{"node 0", 0, fixed(base), true},
		{"node 1023", 1023, fixed(base), true},
		{"at the epoch", 5, fixed(epochMs), true},
		{"last ms of the id space", 5, fixed(epochMs + maxTick), true},
		{"node -1", -1, fixed(base), false},
		{"node 1024", 1024, fixed(base), false},
		{"nil clock", 1, nil, false},
		{"clock before the epoch", 1, fixed(epochMs - 1), false},
		{"clock past 2095", 1, fixed(epochMs + maxTick + 1), false},
		{"clock at 1970", 1, fixed(0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewGenerator(tt.node, tt.now)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestLayout(t *testing.T) {
	c := newClock(epochMs + 5)
	g := mustGen(t, 7, c.now)
	id := g.Next()
	if want := int64(5<<22 | 7<<12); id != want {
		t.Fatalf("id %d (%b), want %d", id, id, want)
	}
	if Node(id) != 7 || seq(id) != 0 || !Time(id).Equal(Epoch.Add(5*time.Millisecond)) {
		t.Fatalf("node %d seq %d time %v", Node(id), seq(id), Time(id))
	}
	c.ms.Store(base)
	id = g.Next()
	if Time(id).UnixMilli() != base || Node(id) != 7 || seq(id) != 0 || id <= 0 {
		t.Fatalf("id %d: time %v node %d seq %d", id, Time(id), Node(id), seq(id))
	}
	// The first id of a generator at the very epoch.
	if id := mustGen(t, 1023, func() int64 { return epochMs }).Next(); id != 1023<<12 {
		t.Fatalf("first id at the epoch %d", id)
	}
}

func TestSequenceOverflowBorrowsNextMillisecond(t *testing.T) {
	c := newClock(base)
	g := mustGen(t, 3, c.now)
	prev := int64(-1)
	const n = 3*4096 + 10
	for i := 0; i < n; i++ {
		id := g.Next()
		if id <= prev {
			t.Fatalf("id %d after %d", id, prev)
		}
		prev = id
		wantMs := base + int64(i/4096)
		if Time(id).UnixMilli() != wantMs || seq(id) != int64(i%4096) || Node(id) != 3 {
			t.Fatalf("id #%d: ms %d seq %d node %d, want ms %d seq %d", i, Time(id).UnixMilli(), seq(id), Node(id), wantMs, i%4096)
		}
	}
	// The clock catching up with the borrowed time does not repeat ids...
	c.ms.Store(base + 3)
	if id := g.Next(); id <= prev || Time(id).UnixMilli() != base+3 || seq(id) != 10 {
		t.Fatalf("at the borrowed ms: id %d ms %d seq %d", id, Time(id).UnixMilli(), seq(id))
	}
	// ...and passing it restarts the sequence.
	c.ms.Store(base + 4)
	if id := g.Next(); Time(id).UnixMilli() != base+4 || seq(id) != 0 {
		t.Fatalf("past the borrowed ms: ms %d seq %d", Time(id).UnixMilli(), seq(id))
	}
}

func TestClockGoingBackwards(t *testing.T) {
	c := newClock(base)
	g := mustGen(t, 9, c.now)
	a := g.Next()
	for _, back := range []int64{base - 1, base - 60_000, epochMs - 1, 0, -1 << 62} {
		c.ms.Store(back)
		b := g.Next()
		if b <= a {
			t.Fatalf("clock %d: id %d not after %d", back, b, a)
		}
		if Time(b).UnixMilli() != base || Node(b) != 9 {
			t.Fatalf("clock %d: ms %d node %d, want the last timestamp", back, Time(b).UnixMilli(), Node(b))
		}
		a = b
	}
	c.ms.Store(base + 1)
	if b := g.Next(); b <= a || Time(b).UnixMilli() != base+1 || seq(b) != 0 {
		t.Fatalf("after recovery: id %d ms %d seq %d", b, Time(b).UnixMilli(), seq(b))
	}
}

func TestExhaustionPanics(t *testing.T) {
	c := newClock(epochMs + maxTick)
	g := mustGen(t, 1, c.now)
	for i := 0; i < 4096; i++ {
		if id := g.Next(); id <= 0 {
			t.Fatalf("id %d", id)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("no panic past the last millisecond")
		}
	}()
	g.Next()
}

// TestConcurrentUnique runs 8 goroutines × 200k ids on a clock that advances
// slower than the ids are drawn, so both the fresh-millisecond and the
// borrowing paths race.
func TestConcurrentUnique(t *testing.T) {
	const workers, per = 8, 200_000
	var calls atomic.Int64
	now := func() int64 { return base + calls.Add(1)/5000 }
	g := mustGen(t, 42, now)
	out := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			ids := make([]int64, per)
			for i := range ids {
				ids[i] = g.Next()
			}
			out[w] = ids
		})
	}
	wg.Wait()
	all := make([]int64, 0, workers*per)
	for w, ids := range out {
		for i, id := range ids {
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("worker %d: id %d after %d", w, id, ids[i-1])
			}
			if Node(id) != 42 {
				t.Fatalf("node %d", Node(id))
			}
		}
		all = append(all, ids...)
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("id %d issued twice", all[i])
		}
	}
}

func TestNodesNeverCollide(t *testing.T) {
	// Same clock, same instant, same sequence: only the node tells them apart.
	c := newClock(base)
	gens := []*Generator{mustGen(t, 0, c.now), mustGen(t, 1, c.now), mustGen(t, 1023, c.now)}
	seen := map[int64]int{}
	for i := 0; i < 10_000; i++ {
		if i == 5000 {
			c.ms.Store(base - 10) // all go backwards together
		}
		for n, g := range gens {
			id := g.Next()
			if prev, dup := seen[id]; dup {
				t.Fatalf("id %d from generators %d and %d", id, prev, n)
			}
			seen[id] = n
		}
	}
}

func TestAppendDecimalParse(t *testing.T) {
	tests := []struct {
		in string
		id int64
		ok bool
	}{
		{"0", 0, true},
		{"7", 7, true},
		{"123456789012345678", 123456789012345678, true},
		{"9223372036854775807", 1<<63 - 1, true},
		{"9223372036854775808", 0, false},
		{"9999999999999999999", 0, false},
		{"10000000000000000000", 0, false},
		{"", 0, false},
		{"00", 0, false},
		{"01", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"1e3", 0, false},
		{"0x10", 0, false},
		{"1_000", 0, false},
		{"１", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			id, ok := Parse([]byte(tt.in))
			if id != tt.id || ok != tt.ok {
				t.Fatalf("Parse(%q) = %d, %v", tt.in, id, ok)
			}
			if ok && string(AppendDecimal(nil, id)) != tt.in {
				t.Fatalf("AppendDecimal(%d) = %q", id, AppendDecimal(nil, id))
			}
		})
	}
	if got := AppendDecimal([]byte("sk:{p1}:o:"), 42); string(got) != "sk:{p1}:o:42" {
		t.Fatalf("got %q", got)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "00", "42", "-1", "9223372036854775807", "9223372036854775808", "18446744073709551616", "", "1a"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		id, ok := Parse(b)
		// The reference: strconv, narrowed to the canonical spelling.
		ref, err := strconv.ParseInt(string(b), 10, 64)
		want := err == nil && ref >= 0 && strconv.FormatInt(ref, 10) == string(b)
		if ok != want || (ok && id != ref) {
			t.Fatalf("Parse(%q) = %d, %v; strconv %d, %v", b, id, ok, ref, err)
		}
		if ok && string(AppendDecimal(nil, id)) != string(b) {
			t.Fatalf("round trip %q -> %d -> %q", b, id, AppendDecimal(nil, id))
		}
	})
}

// A process restarted with its clock behind its previous run starts its
// ids after the floor (what the previous one may have issued), runs ahead
// of its clock until it catches up, and Tick says so; a floor below what
// was issued changes nothing.
func TestFloorAfterRestartBehind(t *testing.T) {
	c := newClock(base)
	prev := mustGen(t, 4, c.now)
	var last int64
	for range 5000 { // over a millisecond's sequence: the ids borrow ahead
		last = prev.Next()
	}
	c.ms.Store(base - 2000) // the next process, 2 s behind
	g := mustGen(t, 4, c.now)
	if id := g.Next(); id >= last {
		t.Fatalf("without a floor the id %d is after %d: the test proves nothing", id, last)
	}
	g = mustGen(t, 4, c.now)
	g.Floor(Time(last).UnixMilli())
	if tick := g.Tick(); tick != Time(last).UnixMilli()+1 {
		t.Errorf("Tick %d after the floor, want %d", tick, Time(last).UnixMilli()+1)
	}
	a := g.Next()
	if a <= last || Time(a).UnixMilli() != Time(last).UnixMilli()+1 || seq(a) != 0 {
		t.Fatalf("first id after the floor %d (ms %d seq %d), want the tick after %d's", a, Time(a).UnixMilli(), seq(a), last)
	}
	g.Floor(base - 60_000) // lower: nothing changes
	if b := g.Next(); b != a+1 {
		t.Fatalf("a lower floor moved the ids: %d after %d", b, a)
	}
	c.ms.Store(base + 5000) // the clock passes the floor: ids follow it again
	if b := g.Next(); Time(b).UnixMilli() != base+5000 || g.Tick() != base+5000 {
		t.Fatalf("id %d at ms %d, Tick %d, want the clock's %d", b, Time(b).UnixMilli(), g.Tick(), base+5000)
	}
}

// TryNext issues nothing past the bound, and uses nothing up when it
// refuses; Next ignores the bound; NoBound lifts it.
func TestBound(t *testing.T) {
	c := newClock(base)
	g := mustGen(t, 2, c.now)
	g.Bound(0) // closed
	if id, ok := g.TryNext(); ok || id != 0 {
		t.Fatalf("closed: TryNext = %d, %v", id, ok)
	}
	g.Bound(base)
	a, ok := g.TryNext()
	if !ok || Time(a).UnixMilli() != base || seq(a) != 0 {
		t.Fatalf("within the bound: %d (ms %d seq %d), %v", a, Time(a).UnixMilli(), seq(a), ok)
	}
	c.ms.Store(base + 1)
	if _, ok := g.TryNext(); ok {
		t.Fatal("an id past the bound")
	}
	if b := g.Next(); b != a+1<<(nodeBits+seqBits)-seq(a) || Time(b).UnixMilli() != base+1 {
		t.Fatalf("Next after a refused TryNext: %d (ms %d), want the next ms's first", b, Time(b).UnixMilli())
	}
	g.NoBound()
	if _, ok := g.TryNext(); !ok {
		t.Fatal("NoBound did not lift the bound")
	}
}

func TestAllocs(t *testing.T) {
	g := mustGen(t, 1, newClock(base).now)
	dst := make([]byte, 0, 32)
	var id int64
	cases := map[string]func(){
		"Next":          func() { id = g.Next() },
		"TryNext":       func() { id, _ = g.TryNext() },
		"AppendDecimal": func() { dst = AppendDecimal(dst[:0], id) },
		"Parse":         func() { id, _ = Parse(dst) },
		"Node and Time": func() { _, _ = Node(id), Time(id) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			if n := testing.AllocsPerRun(1000, f); n != 0 {
				t.Fatalf("%v allocs per run", n)
			}
		})
	}
}

// mutexGenerator is the alternative Next was measured against: the same
// algorithm under a mutex.
type mutexGenerator struct {
	mu    sync.Mutex
	state uint64
	node  uint64
	now   func() int64
}

func (g *mutexGenerator) Next() int64 {
	ms := uint64(max(g.now()-epochMs, 0)) << seqBits
	g.mu.Lock()
	next := max(g.state+1, ms)
	g.state = next
	g.mu.Unlock()
	return int64(next>>seqBits<<(nodeBits+seqBits) | g.node<<seqBits | next&(1<<seqBits-1))
}

func BenchmarkNext(b *testing.B) {
	realClock := func() int64 { return time.Now().UnixMilli() }
	b.Run("cas", func(b *testing.B) {
		g := mustGen(b, 1, realClock)
		b.ReportAllocs()
		for b.Loop() {
			g.Next()
		}
	})
	b.Run("cas parallel", func(b *testing.B) {
		g := mustGen(b, 1, realClock)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				g.Next()
			}
		})
	})
	b.Run("mutex", func(b *testing.B) {
		g := &mutexGenerator{node: 1, now: realClock}
		b.ReportAllocs()
		for b.Loop() {
			g.Next()
		}
	})
	b.Run("mutex parallel", func(b *testing.B) {
		g := &mutexGenerator{node: 1, now: realClock}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				g.Next()
			}
		})
	})
}

func BenchmarkAppendDecimalParse(b *testing.B) {
	g := mustGen(b, 1, newClock(base).now)
	id := g.Next()
	dst := make([]byte, 0, 32)
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendDecimal(dst[:0], id)
		if _, ok := Parse(dst); !ok {
			b.Fatal(dst)
		}
	}
}
