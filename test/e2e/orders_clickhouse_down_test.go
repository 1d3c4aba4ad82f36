package e2e

import (
	"testing"
	"time"

	"flashgate/orders/stock"
)

// TestClickHouseDown10s: ClickHouse is killed for 10 s in the middle of a
// 10,000-purchase run. Purchases do not wait on ClickHouse: every answer is
// the usual 200 or 410 (no error, no 503), and they keep coming at the
// load's pace while it is down, while nothing is stored meanwhile (the
// consumer retries its batch, commits nothing). Once it is back, exactly
// 10,000 rows, every order success in Redis, the outbox empty, reconcile
// clean.
func TestClickHouseDown10s(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: skipped with -short")
	}
	const (
		perProduct = 1000
		outage     = 10 * time.Second
		rate       = 700 // attempts/s: the run spans the outage
	)
	env := newOrdEnv(t)
	products := ordProducts(10)
	e := env.startEdge(true, ordSales(products, perProduct))

	// 500 attempts more than the stock: the last ones meet SOLD_OUT.
	plans := ordPlans("buyer-", perProduct*len(products)+500, products)
	for _, p := range plans {
		env.j.get(p.user)
	}
	l := &ordLoad{target: func() *edge { return e }, j: env.j, workers: 32, every: time.Second / rate}
	done := make(chan []ordAnswer, 1)
	go func() { done <- l.run(plans) }()

	// Orders are being stored before the outage.
	if !waitFor(30*time.Second, func() bool {
		n, err := env.rowCount("")
		return err == nil && n >= 1000 && l.ok.Load() >= 2000
	}) {
		t.Fatalf("no steady state before the outage: %d answered 200", l.ok.Load())
	}
	env.ch.Stop()
	downAt, okAtDown := time.Since(l.start), l.ok.Load()
	// Whatever was in flight when it died has settled after a second.
	settle := time.NewTimer(time.Second)
	<-settle.C
	storedSettled := adminMetric(t, e.admin, "flashgate_orders_stored_total")
	// The outage lasts 10 s: a fault's duration, not a synchronisation.
	rest := time.NewTimer(outage - time.Second)
	<-rest.C
	storedBeforeUp := adminMetric(t, e.admin, "flashgate_orders_stored_total")
	okDuring := l.ok.Load() - okAtDown
	if err := env.ch.Start(); err != nil {
		t.Fatal(err)
	}
	upAt := time.Since(l.start)
	answers := <-done
	t.Logf("ClickHouse down from %v to %v (restart took %v); %d purchases answered 200 meanwhile",
		downAt.Round(time.Millisecond), upAt.Round(time.Millisecond), env.ch.StartTook().Round(time.Millisecond), okDuring)

	if storedSettled <= 0 {
		t.Errorf("flashgate_orders_stored_total = %v after %d orders answered: the metric is missing", storedSettled, okAtDown)
	}
	if storedBeforeUp != storedSettled {
		t.Errorf("the consumer stored %v orders while ClickHouse was down (%v after 1 s, %v before it came back)",
			storedBeforeUp-storedSettled, storedSettled, storedBeforeUp)
	}
	counts, ok := summarize(plans, answers)
	t.Logf("answers: %v", counts)
	for k := range counts {
		if k != "200" && k != "410 SOLD_OUT" && k != "409 LIMIT_REACHED" {
			t.Errorf("%d shoppers got %q: ClickHouse's outage reached the purchase path", counts[k], k)
		}
	}
	if counts["200"] != perProduct*len(products) {
		t.Fatalf("%d answers 200, want %d", counts["200"], perProduct*len(products))
	}
	// Purchases kept their pace while ClickHouse was down (at least half
	// of what the pace allows), and were not slowed by it.
	if want := int64(rate * outage.Seconds() / 2); okDuring < want {
		t.Errorf("only %d purchases answered 200 during the %v outage, want >= %d", okDuring, outage, want)
	}
	var during, outside []time.Duration
	for _, a := range answers {
		if a.at >= downAt && a.at < upAt {
			during = append(during, a.took)
		} else {
			outside = append(outside, a.took)
		}
	}
	p99 := percentile(during, 0.99)
	t.Logf("token+do latency during the outage p50 %v p99 %v max %v; otherwise p50 %v p99 %v",
		percentile(during, 0.5), p99, percentile(during, 1), percentile(outside, 0.5), percentile(outside, 0.99))
	if p99 > time.Second {
		t.Errorf("p99 latency during the outage %v: purchases waited on ClickHouse", p99)
	}

	took := env.awaitRows(int64(len(ok)), 60*time.Second)
	t.Logf("all %d rows stored %v after the load ended", len(ok), took.Round(time.Millisecond))
	env.awaitStates(ok, stock.StateSuccess, 30*time.Second)
	rows := env.rows()
	for _, o := range ok {
		if r, found := rows[o.id]; !found || r.status != 0 || r.product != o.product {
			t.Errorf("order %v: row %+v (found %v)", o, r, found)
		}
	}
	if !waitFor(10*time.Second, func() bool { return env.outboxTotal(products) == 0 }) {
		t.Errorf("outbox still holds %d entries", env.outboxTotal(products))
	}
	checkReconcile(t, e.admin, len(products))
}
