package e2e

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"flashgate/orders/stock"
)

// TestEdgeKilledMidRun: the real binary (in-edge consumer into ClickHouse,
// kafka.timeout 500ms, relay_min_age 1s) sells under load and is killed
// with SIGKILL while purchases are in flight: Kafka had stopped answering
// produce requests a moment before, so some deductions exist only as
// outbox entries when the process dies. A fresh process with the same
// config takes over on the same address and the shoppers finish the sale.
// Then: every order answered 200 is stored; rows = units Redis deducted (so
// no more rows than deductions, and the in-doubt orders are stored too);
// the new process's relay re-sent every orphaned outbox entry and the
// outbox is empty; every order is success in Redis; `proxy reconcile` is
// clean.
func TestEdgeKilledMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a real process under load: skipped with -short")
	}
	bin := buildProxy(t)
	env := newOrdEnv(t)
	const perProduct = 500
	products := ordProducts(5)
	addr, admin := ordFreePort(t), ordFreePort(t)
	ov := append([]string{fmt.Sprintf("node_id: 7\nredis: {addr: %q}\nlisten: {addr: %q}\nadmin: {addr: %q}\nlog: {level: info, format: json}\n",
		env.redis.Addr(), addr, admin)},
		env.pipeline(true, "kafka: {timeout: 500ms}\norders: {relay_min_age: 1s, relay_interval: 200ms}\n", ordSales(products, perProduct))...)
	cfg := writeConfig(t, ov...)

	// While hold is set, Kafka takes produce requests and never answers
	// them: events in flight die with the process.
	var hold atomic.Bool
	var swallowed atomic.Int64
	env.kafka.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		env.kafka.KeepControl()
		if hold.Load() {
			swallowed.Add(1)
			return nil, nil, true
		}
		return nil, nil, false
	})

	p1 := startEdgeProc(t, bin, "-c", cfg)
	e := &edge{t: t, addr: addr, admin: admin, api: newAPIClient()}
	t.Cleanup(e.api.CloseIdleConnections)
	restarted := make(chan struct{})
	l := &ordLoad{target: func() *edge { return e }, j: env.j, workers: 32, onErr: func() { <-restarted }}
	plans := ordPlans("buyer-", perProduct*len(products)+250, products)
	for _, p := range plans {
		env.j.get(p.user)
	}
	done := make(chan []ordAnswer, 1)
	go func() { done <- l.run(plans) }()

	if !waitFor(30*time.Second, func() bool { return l.ok.Load() >= 600 }) {
		t.Fatalf("only %d purchases before the kill", l.ok.Load())
	}
	hold.Store(true)
	// Events are now published into the void: their orders exist only as
	// outbox entries.
	if !waitFor(5*time.Second, func() bool { return swallowed.Load() >= 3 }) {
		t.Fatalf("only %d produce requests reached Kafka while it held them", swallowed.Load())
	}
	p1.kill9()
	okAtKill := l.ok.Load()
	orphaned := env.outboxTotal(products)
	if orphaned == 0 {
		t.Fatal("the killed process left no outbox entry: nothing for the relay to prove")
	}
	hold.Store(false)
	t.Logf("killed after %d answers 200; %d outbox entries left behind (%d produce requests never answered)", okAtKill, orphaned, swallowed.Load())

	t0 := time.Now()
	startEdgeProc(t, bin, "-c", cfg)
	t.Logf("new process serving after %v", time.Since(t0).Round(time.Millisecond))
	close(restarted)
	answers := <-done
	counts, ok := summarize(plans, answers)
	t.Logf("answers: %v", counts)
	// In doubt: no answer (the process died with the request) or 503
	// naming its order (Kafka did not acknowledge within kafka.timeout).
	unknown := 0
	for i, a := range answers {
		switch {
		case a.err != nil || a.status == 503 && a.code == "DEGRADED" && a.order > 0:
			unknown++
		case a.status != 200 && a.status != 410:
			t.Errorf("attempt %d: %d %s %s", i, a.status, a.code, a.msg)
		}
	}

	var deducted int64
	for _, p := range products {
		rem := env.rd.stock(p)
		if rem != 0 {
			t.Errorf("stock %s = %d after the run, want 0 (sold out)", p, rem)
		}
		deducted += perProduct - rem
	}
	took, err := env.waitRows(deducted, 90*time.Second)
	if err != nil {
		// Go on: the checks below name the orders that are missing.
		t.Error(err)
		env.explainMissing(products)
	}
	t.Logf("%d rows (= units deducted) %v after the load ended", deducted, took.Round(time.Millisecond))
	rows := env.rows()
	for _, o := range ok {
		if r, found := rows[o.id]; !found || r.status != 0 || r.product != o.product {
			t.Errorf("order %v answered 200 is not stored: %+v (found %v)", o, r, found)
		}
	}
	if extra := int(deducted) - len(ok); extra < 0 || extra > unknown {
		t.Errorf("%d rows for %d answers 200: %d orders beyond them, but only %d answers were unknown (transport error or 503)",
			deducted, len(ok), extra, unknown)
	} else {
		t.Logf("%d rows = %d answered 200 + %d in-doubt orders (deducted, answer lost with the process or 503) stored through the outbox", deducted, len(ok), extra)
	}

	// The new process's relay delivered what the killed one left behind.
	if !waitFor(10*time.Second, func() bool { return env.outboxTotal(products) == 0 }) {
		t.Errorf("outbox still holds %d entries", env.outboxTotal(products))
	}
	relayed := adminMetric(t, admin, "flashgate_outbox_relayed_total")
	if relayed < float64(orphaned) {
		t.Errorf("the new process relayed %v outbox entries, want >= the %d orphaned ones", relayed, orphaned)
	}
	var all []ordID
	for id, r := range rows {
		all = append(all, ordID{r.product, id})
	}
	env.awaitStates(all, stock.StateSuccess, 30*time.Second)

	code, stdout, stderr := runProxy(t, 2*time.Minute, bin, "reconcile", "-c", cfg)
	want := "RECONCILE products=" + strconv.Itoa(len(products)) + " oversold=0 lost=0 duplicated=0"
	if code != 0 || lastLine(stdout) != want {
		t.Errorf("proxy reconcile exited %d:\n%s\nstderr:\n%s\nwant exit 0 and %q", code, stdout, stderr, want)
	}
}
