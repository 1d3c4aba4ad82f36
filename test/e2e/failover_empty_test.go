package e2e

import (
	"fmt"
	"testing"
	"time"

	"flashgate/internal/redistest"
)

// TestFailoverRestartedEmpty: Redis (no persistence) is killed mid-sale
// and comes back empty while shoppers buy through two edges. One sale is
// in the config file; two were created through the admin API (POST
// /admin/activities), which no edge's file knows. Every sale comes back
// rebuilt from the ledger — never "unknown product" — and sells again
// within seconds; nothing is oversold, nobody buys twice, every 200 is
// stored once and `proxy reconcile` is clean. Every product lived on the
// one server that failed, so there is no healthy product here.
func TestFailoverRestartedEmpty(t *testing.T) {
	if testing.Short() {
		t.Skip("kills Redis under load through two edge processes: skipped with -short")
	}
	const units, limit = 60, 1
	r := redistest.New(t)
	env := newOrdEnvOn(t, r, r.Addr())
	rig := startFoRig(t, env, r.Addr(), ordSales([]string{"file1"}, units))
	products := []string{"admin1", "admin2", "file1"}
	for _, p := range products[:2] {
		body := fmt.Sprintf(`{"productId":%q,"name":"Admin %s","price":"5.00","stock":%d,"limit":%d,"start":"+0s","end":"+1h"}`, p, p, units, limit)
		if code, res := adminPost(t, rig.edges[0].admin, "/admin/activities", body); code != 200 {
			t.Fatalf("POST /admin/activities %s: %d %s", body, code, res)
		}
	}
	rig.awaitActive(products, 5*time.Second)

	var streams []foStream
	for _, p := range products {
		streams = append(streams, foStream{product: p, rate: 20, workers: 8})
	}
	l := startFoLoad(t, rig, streams...)
	l.await(20*time.Second, "20 units of every product sold before the crash", func() bool {
		return l.okSince(products, nil, 20)
	})
	closedBefore := l.closedNow(products)
	r.Stop()
	l.mark("redis killed (SIGKILL, no persistence)")
	l.await(10*time.Second, "every product turned a shopper away while Redis was down", func() bool {
		return l.closedSince(products, closedBefore)
	})
	r.Start()
	back := l.mark("redis restarted empty and answering")
	if !waitFor(30*time.Second, func() bool { return l.soldOutAll(products, 10) }) {
		t.Errorf("not every product sold out within 30s of Redis coming back")
	}
	answers := l.finish()
	for _, a := range answers {
		if a.status == 404 {
			t.Errorf("%s answered %d %s (%s) at %.2fs: a live sale Redis lost is recovering, never unknown", a.product, a.status, a.code, a.msg, a.at.Seconds())
			break
		}
	}
	rig.verify(l, answers, foExpect{stock: foStocks(products, units), limit: limit, recovered: products, back: back})
}
