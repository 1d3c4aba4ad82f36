package sale

import (
	"bytes"
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/metrics"
	"flashgate/orders/stock"
	"flashgate/sale/api"
)

// The circuit breakers: one breaker's states (Breaker), one per product
// (Breakers), and the purchase path's use of them on a real redis-server
// (a failed script call counts once, a failing product opens only its own).

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	now := time.Unix(1000, 0)
	var changes []string
	b := NewBreaker(3, 5*time.Second, func() time.Time { return now }, func(from, to BreakerState) {
		changes = append(changes, from.String()+">"+to.String())
	})
	for i := 0; i < 2; i++ {
		if !b.Allow() {
			t.Fatal("closed breaker refused")
		}
		b.Failure()
	}
	b.Success() // a success resets the count
	for i := 0; i < 3; i++ {
		b.Allow()
		b.Failure()
	}
	if b.State() != Open || b.Allow() {
		t.Fatalf("state %v after 3 consecutive failures", b.State())
	}
	now = now.Add(5 * time.Second)
	if !b.Allow() {
		t.Fatal("no probe after open_for")
	}
	if b.Allow() {
		t.Fatal("second concurrent probe allowed")
	}
	b.Failure() // probe failed: open again
	if b.State() != Open || b.Allow() {
		t.Fatalf("state %v after failed probe", b.State())
	}
	now = now.Add(5 * time.Second)
	if !b.Allow() {
		t.Fatal("no second probe")
	}
	b.Success()
	if b.State() != Closed || !b.Allow() {
		t.Fatalf("state %v after successful probe", b.State())
	}
	want := []string{"closed>open", "open>half_open", "half_open>open", "open>half_open", "half_open>closed"}
	if len(changes) != len(want) {
		t.Fatalf("changes %v", changes)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("changes %v, want %v", changes, want)
		}
	}
}

// A probe whose attempt says nothing about Redis (never sent, or its call's
// failure counted by another attempt) abstains: the next caller probes.
// Without it the breaker would stay half-open with no probe, for good.
func TestBreakerProbeAbstains(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBreaker(1, time.Second, func() time.Time { return now }, nil)
	if ok, probe := b.Admit(); !ok || probe {
		t.Fatalf("closed: Admit = %v, %v, want true, false", ok, probe)
	}
	b.Failure()
	if ok, _ := b.Admit(); ok {
		t.Fatal("open breaker admitted")
	}
	now = now.Add(time.Second)
	if ok, probe := b.Admit(); !ok || !probe {
		t.Fatalf("after open_for: Admit = %v, %v, want the probe", ok, probe)
	}
	if ok, _ := b.Admit(); ok {
		t.Fatal("second probe admitted while the first is out")
	}
	b.Abstain()
	if b.State() != HalfOpen {
		t.Fatalf("state %v after abstaining, want half_open", b.State())
	}
	ok, probe := b.Admit()
	if !ok || !probe {
		t.Fatalf("after the probe abstained: Admit = %v, %v, want a new probe", ok, probe)
	}
	b.Success()
	if b.State() != Closed {
		t.Fatalf("state %v after the probe succeeded", b.State())
	}
}

func TestBreakerAllocs(t *testing.T) {
	b := NewBreaker(1<<30, time.Second, nil, nil)
	if n := testing.AllocsPerRun(1000, func() {
		if ok, _ := b.Admit(); ok {
			b.Failure()
			b.Success()
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// One product's failures open that product's breaker only: the others keep
// calling Redis, and the half-open probe is the failing product's own call.
func TestBreakersArePerProduct(t *testing.T) {
	now := time.Unix(1000, 0)
	var changes []string
	bs := NewBreakers(3, 5*time.Second, func() time.Time { return now }, func(product string, from, to BreakerState) {
		changes = append(changes, product+":"+from.String()+">"+to.String())
	})
	a, b := bs.For("a"), bs.For("b")
	if bs.For("a") != a {
		t.Fatal("a second For made a second breaker for the same product")
	}
	for range 3 {
		if ok, _ := a.Admit(); !ok {
			t.Fatal("closed breaker refused")
		}
		a.Failure()
		if ok, _ := b.Admit(); !ok {
			t.Fatal("b refused while only a failed")
		}
		b.Success()
	}
	if bs.State("a") != Open || bs.State("b") != Closed {
		t.Fatalf("states a=%v b=%v after a's 3 failures, want open and closed", bs.State("a"), bs.State("b"))
	}
	if ok, _ := a.Admit(); ok {
		t.Fatal("a admitted while open")
	}
	if bs.Worst() != Open {
		t.Fatalf("edge summary %v with a open", bs.Worst())
	}

	now = now.Add(5 * time.Second)
	// b's calls go on and are never a's probe.
	if ok, probe := b.Admit(); !ok || probe {
		t.Fatalf("b: Admit = %v, %v while a is due a probe, want true, false", ok, probe)
	}
	ok, probe := a.Admit()
	if !ok || !probe {
		t.Fatalf("a after open_for: Admit = %v, %v, want its probe", ok, probe)
	}
	if ok, _ := a.Admit(); ok {
		t.Fatal("a second probe for a while the first is out")
	}
	if bs.State("a") != HalfOpen || bs.Worst() != HalfOpen {
		t.Fatalf("a %v, summary %v during the probe, want half_open", bs.State("a"), bs.Worst())
	}
	a.Success()
	if bs.State("a") != Closed || bs.Worst() != Closed {
		t.Fatalf("a %v, summary %v after its probe succeeded", bs.State("a"), bs.Worst())
	}
	want := []string{"a:closed>open", "a:open>half_open", "a:half_open>closed"}
	if len(changes) != len(want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("changes %v, want %v", changes, want)
		}
	}
	if bs.AllTransitions() != 3 || bs.Transitions("a") != 3 || bs.Transitions("b") != 0 {
		t.Fatalf("transitions: all %d, a %d, b %d; want 3, 3, 0", bs.AllTransitions(), bs.Transitions("a"), bs.Transitions("b"))
	}
}

// Reading a product's state (metrics, dashboard) makes no breaker: only
// the handler, after the product check, does.
func TestBreakersStateMakesNone(t *testing.T) {
	bs := NewBreakers(1, time.Second, nil, nil)
	if bs.State("nope") != Closed || bs.Transitions("nope") != 0 || bs.Worst() != Closed {
		t.Fatal("an unknown product's breaker is not closed")
	}
	if n := len(*bs.m.Load()); n != 0 {
		t.Fatalf("%d breakers after reading states, want none", n)
	}
}

// The purchase path's breaker work: a lookup of the product's breaker, its
// admission and its verdict, through every state. Lock-free in the closed
// state (atomics and a map read), allocation-free in all of them.
func TestBreakersAllocs(t *testing.T) {
	now := time.Unix(1000, 0)
	bs := NewBreakers(2, time.Second, func() time.Time { return now }, nil)
	products := []string{"a", "b", "c"}
	for _, p := range products {
		bs.For(p) // made once, off the measured path
	}
	i := 0
	cycle := func() {
		i++
		b := bs.For(products[i%len(products)])
		for range 2 { // closed: two failed calls open it
			if ok, _ := b.Admit(); ok {
				b.Failure()
			}
		}
		if ok, _ := b.Admit(); ok {
			t.Fatal("open breaker admitted")
		}
		now = now.Add(time.Second)
		if _, probe := b.Admit(); probe {
			b.Abstain() // the probe's call said nothing about Redis
		}
		if _, probe := b.Admit(); probe {
			b.Success() // the next probe closes it
		}
	}
	cycle()
	if bs.AllTransitions() != 3 || bs.State("b") != Closed {
		t.Fatalf("a cycle made %d transitions, ended %v; want 3 (open, half-open, closed), closed", bs.AllTransitions(), bs.State("b"))
	}
	if n := testing.AllocsPerRun(1000, cycle); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// TestBreakerOpensOnlyTheFailingProduct: every script call for one product
// fails (its stock key holds the wrong type: a real Redis error on a real
// server, for that product only) while another product sells on. The
// failing product's breaker opens and answers without calling Redis; the
// other's stays closed and never answers 503; after open_for the failing
// product's own call is its probe, and once Redis serves it again the probe
// closes it.
func TestBreakerOpensOnlyTheFailingProduct(t *testing.T) {
	const failures = 3
	now := time.Unix(1000, 0)
	brks := NewBreakers(failures, 5*time.Second, func() time.Time { return now }, nil)
	r := newDoRig(t, stock.Options{}, brks, "hot", "calm")
	rd := redistest.Client(t, r.srv.Addr())
	ctx := context.Background()
	for _, c := range []string{"hot", "calm"} {
		if code := r.do(c, "warmup"); code != 200 {
			t.Fatalf("warm-up purchase of %s: %d", c, code)
		}
	}
	stockKey := stock.StockKey("hot")
	left, err := rd.Do(ctx, rd.B().Get().Key(stockKey).Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	if err := rd.Do(ctx, rd.B().Del().Key(stockKey).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := rd.Do(ctx, rd.B().Hset().Key(stockKey).FieldValue().FieldValue("broken", "1").Build()).Error(); err != nil {
		t.Fatal(err)
	}

	for i := range failures {
		if code := r.do("hot", "h"+strconv.Itoa(i)); code != 503 {
			t.Fatalf("hot attempt %d on a broken key: %d, want 503", i, code)
		}
		if code := r.do("calm", "c"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("calm attempt %d while hot fails: %d, want 200", i, code)
		}
	}
	if brks.State("hot") != Open || brks.State("calm") != Closed {
		t.Fatalf("after %d failed hot calls: hot %v, calm %v; want open, closed", failures, brks.State("hot"), brks.State("calm"))
	}
	calls, _ := r.stats()
	if code := r.do("hot", "refused"); code != 503 {
		t.Fatalf("hot with its breaker open: %d, want 503", code)
	}
	if c, _ := r.stats(); c != calls {
		t.Fatalf("hot's open breaker let %d script calls through, want none", c-calls)
	}
	for i := range 5 {
		if code := r.do("calm", "c-open"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("calm attempt %d while hot's breaker is open: %d, want 200", i, code)
		}
	}

	var reg metrics.Registry
	r.svc.RegisterMetrics(&reg)
	var out bytes.Buffer
	reg.WriteTo(&out)
	for _, line := range []string{
		`flashgate_redis_breaker_product_state{product="hot"} 1`,
		`flashgate_redis_breaker_product_state{product="calm"} 0`,
		`flashgate_redis_breaker_product_transitions_total{product="hot"} 1`,
		`flashgate_redis_breaker_product_transitions_total{product="calm"} 0`,
		"flashgate_redis_breaker_state 1",
		"flashgate_redis_breaker_transitions_total 1",
	} {
		if !strings.Contains(out.String(), "\n"+line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, out.String())
		}
	}

	// open_for later, still broken: hot's next call is the probe, and it
	// fails; calm is untouched.
	now = now.Add(5 * time.Second)
	calls, _ = r.stats()
	if code := r.do("hot", "probe1"); code != 503 {
		t.Fatalf("failed probe: %d, want 503", code)
	}
	if c, _ := r.stats(); c != calls+1 {
		t.Fatalf("the probe made %d script calls, want 1", c-calls)
	}
	if brks.State("hot") != Open || brks.State("calm") != Closed {
		t.Fatalf("after a failed probe: hot %v, calm %v; want open, closed", brks.State("hot"), brks.State("calm"))
	}

	// Repaired: the next probe closes hot's breaker.
	if err := rd.Do(ctx, rd.B().Del().Key(stockKey).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := rd.Do(ctx, rd.B().Set().Key(stockKey).Value(left).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	now = now.Add(5 * time.Second)
	if code := r.do("hot", "probe2"); code != 200 {
		t.Fatalf("probe on a repaired key: %d, want 200", code)
	}
	if brks.State("hot") != Closed {
		t.Fatalf("hot %v after a successful probe, want closed", brks.State("hot"))
	}
	if got := brks.Transitions("calm"); got != 0 {
		t.Errorf("calm's breaker changed state %d times, want never", got)
	}
}

// TestOpenBreakerAnswerAllocs: while a product's breaker is open
// (Redis down: every attempt for it ends here), the purchase call is
// answered from memory without an allocation.
func TestOpenBreakerAnswerAllocs(t *testing.T) {
	brks := NewBreakers(1, time.Hour, nil, nil)
	r := newDoRig(t, stock.Options{}, brks, "p")
	brks.For("p").Failure()
	now := time.Now()
	req := &api.Call{Ctx: new(fasthttp.RequestCtx), NowNano: now.UnixNano(), Endpoint: api.EndpointDo,
		UserID: []byte("u"), ProductID: []byte("p"), Qty: 1, TokenExpiresMs: now.Add(time.Minute).UnixMilli(),
		Checked: api.TokenValid}
	binary.BigEndian.PutUint64(req.TokenNonce[:], nonceSeq.Add(1))
	calls, _ := r.stats()
	run := func() {
		req.Ctx.Response.Reset()
		req.Sale.Sale = nil
		req.Checked = api.TokenValid
		r.svc.Handle(req)
	}
	run()
	if code := req.Ctx.Response.StatusCode(); code != 503 {
		t.Fatalf("status %d with the breaker open, want 503", code)
	}
	if n := testing.AllocsPerRun(1000, run); n != 0 {
		t.Fatalf("%v allocations per attempt answered by an open breaker", n)
	}
	if c, _ := r.stats(); c != calls {
		t.Fatalf("%d script calls with the breaker open", c-calls)
	}
}

// TestBreakerCountsFailedCalls: a hung Redis (SIGSTOP) fails script calls,
// not attempts, and the breaker counts one failure per failed call. Twelve
// concurrent purchases, MaxBatch 4: the first call (1 attempt) times out
// after budget, the next (4 attempts, queued half a budget in) after
// another budget, and the 7 queued with them have spent their own budget
// by then and are never sent (stock.ErrNotSent, no failure). All 12 answer
// 503; the breaker has seen one failure per call (2), not 12, and stays
// closed with breaker_failures 12.
func TestBreakerCountsFailedCalls(t *testing.T) {
	const budget, n = 400 * time.Millisecond, 12
	brks := NewBreakers(n, time.Hour, nil, nil)
	r := newDoRig(t, stock.Options{Timeout: budget, MaxBatch: 4}, brks, "bf")
	brk := brks.For("bf")
	if code := r.do("bf", "warmup"); code != 200 { // loads the script
		t.Fatalf("warm-up purchase: %d", code)
	}
	calls0, sent0 := r.stats()

	r.srv.Pause()
	defer r.srv.Resume()
	codes := make([]int, n)
	var wg sync.WaitGroup
	start := func(i int) { wg.Go(func() { codes[i] = r.do("bf", "u"+strconv.Itoa(i)) }) }
	start(0)
	await.Until(t, 10*time.Second, "the condition", func() bool { c, _ := r.stats(); return c == calls0+1 }) // the first call is held
	// Not synchronisation: the scenario needs the queued attempts' budgets
	// to start well after the first call's. Queued at once, the first call's
	// timer firing a moment late would leave them nothing, and they would
	// all be dropped unsent with that call.
	time.Sleep(budget / 2)
	for i := 1; i < n; i++ {
		start(i)
	}
	wg.Wait()

	for i, c := range codes {
		if c != 503 {
			t.Errorf("attempt %d: status %d, want 503", i, c)
		}
	}
	calls, sent := r.stats()
	calls, sent = calls-calls0, sent-sent0
	t.Logf("%d attempts: %d sent in %d script calls, %d never sent", n, sent, calls, n-sent)
	if sent <= calls || sent >= n {
		t.Fatalf("%d attempts sent in %d calls: the scenario needs a call of several attempts and attempts never sent", sent, calls)
	}
	if got := brk.consec.Load(); got != int64(calls) {
		t.Errorf("breaker counted %d failures for %d failed script calls (%d attempts sent, %d not); want one per call", got, calls, sent, n-sent)
	}
	if brk.State() != Closed {
		t.Errorf("breaker %v after %d failed calls, want closed (breaker_failures %d)", brk.State(), calls, n)
	}
	if got := r.svc.outcomes[outError].Value(); got != n {
		t.Errorf("%d error outcomes, want %d", got, n)
	}

	// Redis back: the next purchase goes through and resets the count.
	r.srv.Resume()
	if code := r.do("bf", "after"); code != 200 {
		t.Fatalf("after resume: status %d", code)
	}
	if got := brk.consec.Load(); got != 0 {
		t.Errorf("%d consecutive failures after a success, want 0", got)
	}
}

// TestBreakerOpensOnFailedCalls: consecutive failed calls still open it.
// Each sequential attempt against a hung Redis is its own call.
func TestBreakerOpensOnFailedCalls(t *testing.T) {
	const budget = 100 * time.Millisecond
	brks := NewBreakers(3, time.Hour, nil, nil)
	r := newDoRig(t, stock.Options{Timeout: budget}, brks, "bo")
	brk := brks.For("bo")
	if code := r.do("bo", "warmup"); code != 200 {
		t.Fatalf("warm-up purchase: %d", code)
	}
	r.srv.Pause()
	defer r.srv.Resume()
	for i := range 3 {
		if code := r.do("bo", "u"+strconv.Itoa(i)); code != 503 {
			t.Fatalf("attempt %d: status %d, want 503", i, code)
		}
	}
	if brk.State() != Open {
		t.Fatalf("breaker %v after 3 failed calls, want open", brk.State())
	}
	calls, _ := r.stats()
	if code := r.do("bo", "refused"); code != 503 {
		t.Fatalf("open breaker: status %d, want 503", code)
	}
	if c, _ := r.stats(); c != calls {
		t.Fatalf("open breaker: %d script calls made, want none", c-calls)
	}
}
