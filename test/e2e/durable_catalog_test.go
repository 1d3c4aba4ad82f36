package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"flashgate/internal/await"
)

// TestCatalogAndDegradeSurviveRedisAndRestarts: two edges on one Redis,
// Kafka and ClickHouse. A degrade set on edge A holds on edge B, and on B
// restarted; a sale created through A's admin API sells on both; then Redis
// restarts empty. The admin sale stays known (503 while it is rebuilt, never
// 404 UNKNOWN_PRODUCT), comes back from the durable catalogue and the
// ledger, and sells exactly its stock; the degrade still holds; reconcile
// is clean.
func TestCatalogAndDegradeSurviveRedisAndRestarts(t *testing.T) {
	env := newOrdEnv(t)
	cfgSales := activities(sale("cf", 10, 1))
	a := env.startEdge(true, cfgSales)
	b := env.startEdge(false, cfgSales)
	jwt := func(u string) string { return env.j.get(u) }

	if code, body := adminPost(t, a.admin, "/admin/activities",
		`{"productId":"as","name":"Admin sale","price":"2.50","stock":12,"limit":1,"start":"+0s","end":"+1h"}`); code != 200 {
		t.Fatalf("create the admin sale: %d %s", code, body)
	}
	await.Until(t, 10*time.Second, "edge B knows the admin sale", func() bool {
		r, err := b.do("GET", "/api/seckill/status?productId=as", "", nil)
		return err == nil && r.status == 200
	})

	// Asking for a purchase token is decided by the same checks as a
	// purchase, degrade switch included, and buys nothing.
	degraded := func(e *edge, user string) bool {
		r, _, err := e.token(jwt(user), "cf")
		return err == nil && r.status == 503 && r.code() == "DEGRADED"
	}
	if degraded(b, "probe0") {
		t.Fatal("cf degraded before the switch")
	}
	code, body := adminPost(t, a.admin, "/admin/degrade", `{"productId":"cf","on":true}`)
	if code != 200 || !strings.Contains(body, `"stored":{"durable":true,"redis":true}`) {
		t.Fatalf("degrade cf on edge A: %d %s", code, body)
	}
	await.Until(t, 10*time.Second, "edge B degrades cf", func() bool { return degraded(b, "probe-b") })
	b.stop()
	b = startEdgeFile(t, b.cfg) // restarted: it learns the switch from Redis and the catalogue
	if !degraded(b, "probe-b2") {
		t.Fatal("edge B forgot the degrade switch on restart")
	}

	// Five units of the admin sale before the loss, on both edges.
	sold := 0
	for i := range 5 {
		e := []*edge{a, b}[i%2]
		if r, err := e.attempt(jwt("before"+strconv.Itoa(i)), "as", 1); err != nil || r.status != 200 {
			t.Fatalf("purchase %d before the loss: %v %v", i, r, err)
		}
		sold++
	}
	env.awaitRows(int64(sold), 30*time.Second)

	env.redis.Restart() // Redis restarted empty
	lostAt := time.Now()

	// While the sale is rebuilt it is closed, never unknown.
	var reopened bool
	closedWith := map[string]int{} // the 503 codes shoppers got meanwhile
	await.Until(t, 120*time.Second, "the admin sale sells again", func() bool {
		for _, e := range []*edge{a, b} {
			r, err := e.attempt(jwt("after-"+strconv.Itoa(sold)), "as", 1)
			switch {
			case err != nil:
			case r.status == 404:
				t.Fatalf("the admin sale answered %v after Redis lost its memory", r)
			case r.status == 503:
				closedWith[r.code()]++
			case r.status == 200:
				sold++
				reopened = true
			}
		}
		return reopened
	})
	t.Logf("closed while rebuilt (503 by code: %v); open again %v after the loss", closedWith, time.Since(lostAt).Round(100*time.Millisecond))
	if closedWith["RECOVERING"] == 0 {
		t.Error("no purchase was answered 503 RECOVERING while the sale was rebuilt")
	}
	if !degraded(a, "probe-a3") || !degraded(b, "probe-b3") {
		t.Fatal("the degrade switch was lifted when Redis lost its memory")
	}

	// What is left sells exactly once.
	for i := 0; i < 20; i++ {
		r, err := []*edge{a, b}[i%2].attempt(jwt("rest"+strconv.Itoa(i)), "as", 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.status == 200 {
			sold++
		}
	}
	if sold != 12 {
		t.Fatalf("sold %d units of 12 across the loss", sold)
	}
	env.awaitRows(int64(sold), 30*time.Second)
	checkReconcile(t, a.admin, 2)
}
