package sale

import (
	"bytes"
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/internal/redistest"
	"flashgate/metrics"
	"flashgate/orders/stock"
	"flashgate/sale/api"
)

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

// TestOpenBreakerAnswerAllocatesNothing: while a product's breaker is open
// (Redis down: every attempt for it ends here), the purchase call is
// answered from memory without an allocation.
func TestOpenBreakerAnswerAllocatesNothing(t *testing.T) {
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
