package proxy

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
)

// TestPipelineHealthMetrics: the series the shipped alerts read for Redis
// reachability and the deadline sweep (deploy/prometheus) follow a real
// Redis going away and coming back, and an unsettled order's deadline.
func TestPipelineHealthMetrics(t *testing.T) {
	redis := redistest.New(t)
	cfg := fmt.Sprintf(baseConfig, "1000r/s", 1000, startOrigin(t)) + fmt.Sprintf(`
redis:
  addr: "%s"
  timeout: 200ms
activities:
  - {product_id: p1, name: "One", price: "1.00", stock: 10, limit: 5, start: "+0s", end: "+1h"}
`, redis.Addr())
	e := startEdge(t, cfg)
	scrape := func() string {
		_, _, m := get(t, e.adminBase+"/metrics")
		return m
	}
	has := func(line string) func() bool {
		return func() bool { return strings.Contains(scrape(), line+"\n") }
	}
	await.Until(t, 10*time.Second, "redis up", has(`flashgate_backend_up{backend="redis"} 1`))
	m := scrape()
	// No consumer on this edge: Kafka is not sampled, and the stages
	// only the consumer has are not written.
	if strings.Contains(m, `backend="kafka"`) || strings.Contains(m, `stage="store"`) {
		t.Fatalf("series of a consumer this edge does not run:\n%s", grepLines(m, "flashgate_backend_up")+"\n"+grepLines(m, "flashgate_orders_errors_total"))
	}
	for _, stage := range []string{"publish", "outbox_ack", "relay"} {
		if !strings.Contains(m, `flashgate_orders_errors_total{stage="`+stage+`"} 0`+"\n") {
			t.Fatalf("no zero %s errors:\n%s", stage, grepLines(m, "flashgate_orders_errors_total"))
		}
	}
	if strings.Contains(m, "flashgate_pay_deadline_next_timestamp_seconds{") {
		t.Fatal("a deadline with no order waiting")
	}

	// One unpaid order due in an hour, stored (its deadline counts from
	// then): its deadline is the sale's next.
	id := mustInt(t, placeOrder(t, e, "p1", time.Hour))
	if _, err := e.srv.Store().MarkSuccess(t.Context(), "p1", id); err != nil {
		t.Fatal(err)
	}
	st, _, err := e.srv.Store().OrderState(t.Context(), "p1", id)
	if err != nil || st.PayByMs == 0 {
		t.Fatalf("order state: %+v %v", st, err)
	}
	want := `flashgate_pay_deadline_next_timestamp_seconds{product="p1"} ` + strconv.FormatFloat(float64(st.PayByMs)/1e3, 'g', -1, 64)
	await.Until(t, 10*time.Second, want, has(want))

	redis.Stop()
	await.Until(t, 10*time.Second, "redis down", has(`flashgate_backend_up{backend="redis"} 0`))
	redis.Start()
	await.Until(t, 10*time.Second, "redis up again", has(`flashgate_backend_up{backend="redis"} 1`))
}
