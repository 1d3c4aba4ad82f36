package e2e

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flashgate/internal/stocktest"
	"flashgate/orders/stock"
)

// TestTenThousandOrdersEndToEnd: 10,000 purchases over HTTP (10 products ×
// 1,000 units, 10,000 distinct buyers, token + do with Bearer JWTs) through
// one edge that publishes to Kafka and consumes into ClickHouse. Exactly
// 10,000 rows after FINAL, one per answered order id and none other, every
// order "success" in Redis, result says success to its owner (and nothing
// to anyone else), the outbox empties, reconcile is clean. It logs the end
// to end figures (orders/s from the first request to the last order stored,
// and the latency from deduction to stored) for the closing note.
func TestTenThousandOrdersEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: skipped with -short")
	}
	const perProduct = 1000
	env := newOrdEnv(t)
	products := ordProducts(10)
	e := env.startEdge(true, ordSales(products, perProduct))
	watch := watchStored(t, env)

	plans := ordPlans("buyer-", perProduct*len(products), products)
	for _, p := range plans {
		env.j.get(p.user) // sign before the clock starts
	}
	l := &ordLoad{target: func() *edge { return e }, j: env.j, workers: 64}
	answers := l.run(plans)
	loadTook := time.Since(l.start)
	counts, ok := summarize(plans, answers)
	if counts["200"] != len(plans) {
		t.Fatalf("answers %v, want %d × 200", counts, len(plans))
	}
	owner := map[int64]ordPlan{}
	var tooks []time.Duration
	for i, a := range answers {
		if _, dup := owner[a.order]; dup || a.order <= 0 {
			t.Fatalf("order id %d answered twice or not at all (plan %d)", a.order, i)
		}
		owner[a.order] = plans[i]
		tooks = append(tooks, a.took)
	}

	stored := env.awaitRows(int64(len(plans)), 60*time.Second)
	env.awaitStates(ok, stock.StateSuccess, 30*time.Second)
	lastStored := watch.last()

	// Every row is an answered order, with the buyer and product the
	// shopper used, stored as an unpaid order (status 0).
	rows := env.rows()
	for id, r := range rows {
		p, found := owner[id]
		switch {
		case !found:
			t.Errorf("row for order %d that no shopper was told about", id)
		case r.product != p.product || r.user != p.user || r.qty != 1 || r.status != 0:
			t.Errorf("order %d stored as %+v, want %s/%s qty 1 status 0", id, r, p.product, p.user)
		}
	}
	for _, p := range products {
		if s := env.rd.stock(p); s != 0 {
			t.Errorf("stock %s = %d, want 0", p, s)
		}
		if st, _ := e.status(p); st != "soldout" {
			t.Errorf("status %s = %q, want soldout", p, st)
		}
	}
	// The result endpoint answers from the order state: success to the
	// owner, 404 to anyone else.
	for i := 0; i < len(ok); i += 250 {
		o := ok[i]
		q := "/api/seckill/result?orderId=" + strconv.FormatInt(o.id, 10) + "&productId=" + o.product
		r := e.must("GET", q, env.j.get(owner[o.id].user), nil)
		if r.status != 200 || jsonStr(r.body, "status") != "success" || jsonStr(r.body, "orderId") != strconv.FormatInt(o.id, 10) {
			t.Errorf("result of %v for its owner: %v, want 200 success", o, r)
		}
		if r := e.must("GET", q, env.j.get("someone-else"), nil); r.status != 404 {
			t.Errorf("result of %v for another shopper: %v, want 404", o, r)
		}
	}
	// The direct path removed every outbox entry (the acker is async).
	if !waitFor(10*time.Second, func() bool { return env.outboxTotal(products) == 0 }) {
		t.Errorf("outbox still holds %d entries", env.outboxTotal(products))
	}
	checkReconcile(t, e.admin, len(products))

	// Figures.
	_, created := env.orderStates(ok)
	lat := watch.latencies(ok, created)
	if len(lat) != len(ok) {
		t.Errorf("saw %d of %d orders turn success through their stored broadcasts", len(lat), len(ok))
	}
	e2e := lastStored.Sub(l.start)
	t.Logf("%d purchases answered in %v (%.0f orders/s, token+do, 64 buyers); do+token latency p50 %v p99 %v",
		len(plans), loadTook.Round(time.Millisecond), float64(len(plans))/loadTook.Seconds(),
		percentile(tooks, 0.5).Round(time.Microsecond), percentile(tooks, 0.99).Round(time.Microsecond))
	t.Logf("end to end: all %d stored %v after the first request (%.0f orders/s, 200 answers -> rows stored); rows complete %v after the last answer",
		len(plans), e2e.Round(time.Millisecond), float64(len(plans))/e2e.Seconds(), stored.Round(time.Millisecond))
	t.Logf("deduction (createdMs) -> stored and marked success: p50 %v p90 %v p99 %v max %v",
		percentile(lat, 0.5), percentile(lat, 0.9), percentile(lat, 0.99), percentile(lat, 1))
}

// storedWatch records when each order's state turns success, from the
// edges' own broadcast of it (stock.Store.PublishStored, which the consumer
// sends right after MarkSuccess, after the rows were inserted into
// ClickHouse and before the offsets are committed): an upper bound of "row
// visible", in either ledger (a keyspace event would name the order's key
// in one, only its order bucket hash in the other).
type storedWatch struct {
	mu    sync.Mutex
	at    map[ordID]time.Time
	final time.Time
}

func watchStored(t *testing.T, env *ordEnv) *storedWatch {
	t.Helper()
	st := stocktest.Open(t, env.redis.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	w := &storedWatch{at: map[ordID]time.Time{}}
	subscribed := make(chan struct{}, 1)
	sub := st.SubscribeChanges(ctx, stock.Follow{Missed: func(context.Context) {
		select {
		case subscribed <- struct{}{}:
		default:
		}
	}}, func(c stock.StateChange) {
		if c.Kind != stock.KindStored {
			return
		}
		now := time.Now()
		w.mu.Lock()
		for _, id := range c.OrderIDs {
			k := ordID{product: strings.Clone(c.ProductID), id: id}
			if _, seen := w.at[k]; !seen {
				w.at[k] = now
				w.final = now
			}
		}
		w.mu.Unlock()
	}, func(msg string) { t.Errorf("malformed state change %q", msg) })
	t.Cleanup(func() { cancel(); sub.Stop() })
	select {
	case <-subscribed:
	case <-time.After(5 * time.Second):
		t.Fatal("state change subscription not active within 5s")
	}
	return w
}

func (w *storedWatch) last() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.final
}

// latencies is, per order seen turning success, that time minus createdMs.
func (w *storedWatch) latencies(ids []ordID, createdMs []int64) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Duration
	for i, id := range ids {
		if at, ok := w.at[id]; ok && createdMs[i] > 0 {
			out = append(out, at.Sub(time.UnixMilli(createdMs[i])).Round(time.Millisecond))
		}
	}
	return out
}
