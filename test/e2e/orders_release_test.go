package e2e

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"flashgate/conf"
	"flashgate/orders/broker"
	"flashgate/orders/consumer"
	"flashgate/orders/order"
	"flashgate/orders/stock"
)

// buyOne is one purchase that must succeed; it returns the order id.
func buyOne(t *testing.T, e *edge, j *jwts, user, product string) int64 {
	t.Helper()
	r, err := e.attempt(j.get(user), product, 1)
	if err != nil || r.status != 200 {
		t.Fatalf("%s buys %s: %v %v, want 200", user, product, r, err)
	}
	id, err := strconv.ParseInt(jsonStr(r.body, "orderId"), 10, 64)
	if err != nil {
		t.Fatalf("orderId in %v: %v", r, err)
	}
	return id
}

// orderEvent rebuilds an order's event from its Redis record, exactly as
// the edge published it.
func (env *ordEnv) orderEvent(product string, id int64) order.Event {
	env.t.Helper()
	ctx, cancel := env.ctx()
	defer cancel()
	m, err := stock.ReadOrders(ctx, env.rd.c, product, []int64{id})
	o, ok := m[id]
	if err != nil || !ok {
		env.t.Fatalf("order %s/%d: %v %v", product, id, ok, err)
	}
	return order.Event{V: order.Version, Type: order.TypeOrder, Order: order.Order{
		ID: id, ProductID: product, UserID: o.UserID, Qty: o.Qty, PriceCents: o.PriceCents,
		CreatedMs: o.CreatedMs, Edge: o.Edge,
	}}
}

// drained waits until the edge's consumer group stored everything in Kafka.
func (env *ordEnv) drained() {
	env.t.Helper()
	ctx, cancel := env.ctx()
	defer cancel()
	if err := consumer.WaitDrained(ctx, env.brokers, broker.Security{}, conf.Defaults().Kafka.Topic, conf.Defaults().Orders.Group, 20*time.Millisecond); err != nil {
		env.t.Fatal(err)
	}
}

// topicMessages is every message ever written to the orders topic (the
// lag of a group that never committed).
func (env *ordEnv) topicMessages() int64 {
	env.t.Helper()
	ctx, cancel := env.ctx()
	defer cancel()
	n, err := consumer.GroupLag(ctx, env.brokers, broker.Security{}, conf.Defaults().Kafka.Topic, "e2e-never-committed")
	if err != nil {
		env.t.Fatal(err)
	}
	return n
}

// TestDuplicateEventOneRow: the same order event reaches Kafka three more
// times after the edge published it — once on its own (a later consumer
// batch: a relay re-send) and twice in one write (one batch: a kafka-go
// retry) — and the order is still one row, with its content, even after
// ClickHouse merged the parts; reconcile counts no duplicate.
func TestDuplicateEventOneRow(t *testing.T) {
	env := newOrdEnv(t)
	e := env.startEdge(true, activities(sale("d", 10, 1)))
	id := buyOne(t, e, env.j, "alice", "d")
	env.awaitStates([]ordID{{"d", id}}, stock.StateSuccess, 15*time.Second)
	env.drained()

	ev := env.orderEvent("d", id)
	val, err := ev.Encode()
	if err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(env.brokers...), Topic: conf.Defaults().Kafka.Topic, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: 5 * time.Millisecond}
	defer w.Close()
	msg := kafka.Message{Key: ev.Key(), Value: val}
	ctx, cancel := env.ctx()
	defer cancel()
	if err := w.WriteMessages(ctx, msg); err != nil {
		t.Fatal(err)
	}
	env.drained()
	if err := w.WriteMessages(ctx, msg, msg); err != nil {
		t.Fatal(err)
	}
	env.drained()
	if n := env.topicMessages(); n != 4 {
		t.Fatalf("orders topic holds %d messages, want 4 copies of the one order", n)
	}

	if n, err := env.rowCount("order_id = ?", uint64(id)); err != nil || n != 1 {
		t.Errorf("order %d: %d rows after FINAL (%v), want 1", id, n, err)
	}
	if n, err := env.rowCount(""); err != nil || n != 1 {
		t.Errorf("%d rows in all (%v), want 1", n, err)
	}
	raw := env.rawRowCount("order_id = ?", uint64(id))
	if err := env.chc.Exec(ctx, "OPTIMIZE TABLE "+ordDatabase+".seckill_order FINAL"); err != nil {
		t.Fatal(err)
	}
	if n := env.rawRowCount("order_id = ?", uint64(id)); n != 1 {
		t.Errorf("after OPTIMIZE FINAL the table holds %d rows of order %d, want 1", n, id)
	}
	t.Logf("4 events of order %d: %d physical rows before the merge, one after FINAL and after OPTIMIZE", id, raw)
	rows := env.rows()
	if r := rows[id]; r.user != "alice" || r.product != "d" || r.qty != 1 || r.status != 0 || int64(r.updateMs) != ev.CreatedMs {
		t.Errorf("row %+v, want alice/d qty 1 status 0 (unpaid) version %d", r, ev.CreatedMs)
	}
	if s, _ := env.orderStates([]ordID{{"d", id}}); s[0] != stock.StateSuccess {
		t.Errorf("order state %q after the duplicates, want success", s[0])
	}
	checkReconcile(t, e.admin, 1)
}

// TestReleaseTwiceReturnsStockOnce: two edges share Redis, Kafka and
// ClickHouse (the first runs the consumer). Product r: 3 units, limit 2.
// alice buys 2 (a1, a2), bob 1: sold out on both edges. Cancelling a1 twice
// (once on each edge's admin listener) returns its unit once: stock exactly
// 1, alice's count exactly 1, the sale's released counter 1; the second
// cancel is a 404. One status-2 row; the result says cancelled. The
// second edge's sold-out flag is cleared by the broadcast; alice buys again
// there exactly once, and nothing more is sellable.
func TestReleaseTwiceReturnsStockOnce(t *testing.T) {
	env := newOrdEnv(t)
	const product = "r"
	sales := activities(sale(product, 3, 2))
	e1 := env.startEdge(true, sales)
	e2 := env.startEdge(false, sales)
	a1 := buyOne(t, e1, env.j, "alice", product)
	a2 := buyOne(t, e1, env.j, "alice", product)
	b1 := buyOne(t, e1, env.j, "bob", product)
	if s := env.rd.stock(product); s != 0 {
		t.Fatalf("stock %d after 3 purchases, want 0", s)
	}
	if !waitFor(5*time.Second, func() bool { st, _ := e2.status(product); return st == "soldout" }) {
		t.Fatal("second edge never showed the product sold out")
	}
	bought := []ordID{{product, a1}, {product, a2}, {product, b1}}
	env.awaitStates(bought, stock.StateSuccess, 15*time.Second)
	env.awaitRows(3, 15*time.Second)

	body := `{"productId":"` + product + `","orderId":"` + strconv.FormatInt(a1, 10) + `"}`
	if code, text := adminPost(t, e1.admin, "/admin/orders/cancel", body); code != 200 || !strings.Contains(text, `"released":true`) {
		t.Fatalf("first cancel: %d %s, want 200 released", code, text)
	}
	// Cancelling is idempotent: repeats answer 200 "already released" and
	// return no stock.
	if code, text := adminPost(t, e2.admin, "/admin/orders/cancel", body); code != 200 || !strings.Contains(text, `"alreadyReleased":true`) {
		t.Errorf("second cancel (other edge): %d %s, want 200 alreadyReleased", code, text)
	}
	if code, text := adminPost(t, e1.admin, "/admin/orders/cancel", body); code != 200 || !strings.Contains(text, `"alreadyReleased":true`) {
		t.Errorf("third cancel: %d %s, want 200 alreadyReleased", code, text)
	}
	if s := env.rd.stock(product); s != 1 {
		t.Errorf("stock %d after releasing one unit twice, want exactly 1", s)
	}
	if n := env.rd.buyers(product)["alice"]; n != 1 {
		t.Errorf("alice's count %d after the release, want exactly 1", n)
	}
	if m := env.saleMeta(product); m["released"] != "1" {
		t.Errorf("sale meta released = %q, want 1", m["released"])
	}
	if !waitFor(5*time.Second, func() bool { st, _ := e2.status(product); return st == "active" }) {
		st, rem := e2.status(product)
		t.Fatalf("second edge still shows %q (remaining %d) after the release", st, rem)
	}
	// One status-2 row, the order's.
	if !waitFor(15*time.Second, func() bool {
		n, err := env.rowCount("status = 2")
		return err == nil && n == 1
	}) {
		n, err := env.rowCount("status = 2")
		t.Fatalf("%d status-2 rows (%v), want 1", n, err)
	}
	if r := env.rows()[a1]; r.status != 2 || r.user != "alice" {
		t.Errorf("row of a1 %+v, want alice status 2", r)
	}
	q := "/api/seckill/result?orderId=" + strconv.FormatInt(a1, 10) + "&productId=" + product
	if r := e2.must("GET", q, env.j.get("alice"), nil); r.status != 200 || jsonStr(r.body, "status") != "cancelled" {
		t.Errorf("result of the released order: %v, want cancelled", r)
	}

	// alice buys again on the second edge, exactly once.
	a3 := buyOne(t, e2, env.j, "alice", product)
	for _, u := range []string{"alice", "bob", "carol"} {
		if r, err := e2.attempt(env.j.get(u), product, 1); err != nil || r.status == 200 {
			t.Errorf("%s after the re-sale: %v %v, want no purchase", u, r, err)
		}
	}
	if s, n := env.rd.stock(product), env.rd.buyers(product)["alice"]; s != 0 || n != 2 {
		t.Errorf("stock %d alice %d, want 0 and 2", s, n)
	}
	env.awaitStates([]ordID{{product, a3}}, stock.StateSuccess, 15*time.Second)
	env.awaitRows(4, 15*time.Second)
	if n, err := env.rowCount("status = 0"); err != nil || n != 3 {
		t.Errorf("%d status-0 (unpaid) rows (%v), want 3 (a2, b1, a3)", n, err)
	}
	checkReconcile(t, e1.admin, 1)
}

// TestReleaseClearsOtherEdgesBoughtCache: alice reached her limit on the
// second edge (its local "already bought" cache remembers her), then one of
// her orders is cancelled on the first edge. Her unit is back in Redis, so
// the second edge must let her buy again — not answer 409 from a cache
// that only the cancelling edge forgot.
func TestReleaseClearsOtherEdgesBoughtCache(t *testing.T) {
	env := newOrdEnv(t)
	const product = "c"
	sales := activities(sale(product, 5, 1))
	e1 := env.startEdge(true, sales)
	e2 := env.startEdge(false, sales)
	a1 := buyOne(t, e1, env.j, "alice", product)
	env.awaitStates([]ordID{{product, a1}}, stock.StateSuccess, 15*time.Second)
	if r, err := e2.attempt(env.j.get("alice"), product, 1); err != nil || r.status != 409 {
		t.Fatalf("alice's second purchase on the second edge: %v %v, want 409 LIMIT_REACHED", r, err)
	}
	body := `{"productId":"` + product + `","orderId":"` + strconv.FormatInt(a1, 10) + `"}`
	if code, text := adminPost(t, e1.admin, "/admin/orders/cancel", body); code != 200 {
		t.Fatalf("cancel: %d %s", code, text)
	}
	if n := env.rd.buyers(product)["alice"]; n != 0 {
		t.Fatalf("alice's count in Redis %d after the release, want 0", n)
	}
	// A shopper retries for a few seconds, well under the cache's 30 s TTL.
	var last resp
	if !waitFor(3*time.Second, func() bool {
		r, err := e2.attempt(env.j.get("alice"), product, 1)
		last = r
		return err == nil && r.status == 200
	}) {
		t.Errorf("alice still gets %v on the second edge 3 s after her order was released (stale bought cache: the release is not broadcast to other edges' caches)", last)
	}
}

// TestReleaseEventNotLostWhenKafkaFails: Kafka refuses the cancel's
// release event (every produce request fails, kafka-go retries until it
// gives up), so the admin call fails after kafka.timeout although the units
// are back in stock. The operator retries, as the error invites, once Kafka
// is back: the release must then reach the order store (one status-2 row)
// and reconcile must be clean.
func TestReleaseEventNotLostWhenKafkaFails(t *testing.T) {
	env := newOrdEnv(t)
	const product = "k"
	e := env.startEdge(true, activities(sale(product, 5, 1)), "kafka: {timeout: 500ms}\n")
	a1 := buyOne(t, e, env.j, "alice", product)
	env.awaitStates([]ordID{{product, a1}}, stock.StateSuccess, 15*time.Second)
	env.drained()

	var hold atomic.Bool
	var refused atomic.Int64
	hold.Store(true)
	env.kafka.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if hold.Load() {
			env.kafka.KeepControl()
			refused.Add(1)
			return nil, errors.New("e2e: produce refused"), true // the connection is closed
		}
		env.kafka.DropControl()
		return nil, nil, false
	})
	body := `{"productId":"` + product + `","orderId":"` + strconv.FormatInt(a1, 10) + `"}`
	code, text := adminPost(t, e.admin, "/admin/orders/cancel", body)
	t.Logf("cancel while Kafka refuses produce requests: %d %s", code, strings.TrimSpace(text))
	// kafka-go retries the batch in the background (10 attempts): Kafka
	// comes back once it gave up.
	t0 := time.Now()
	if !waitFor(20*time.Second, func() bool { return refused.Load() >= 10 }) {
		t.Logf("only %d produce requests refused", refused.Load())
	}
	hold.Store(false)
	t.Logf("Kafka back after %d refused produce requests (%v after the cancel answered)", refused.Load(), time.Since(t0).Round(time.Millisecond))
	if s := env.rd.stock(product); s != 5 {
		t.Fatalf("stock %d, want 5 (the release script ran)", s)
	}
	if code != 200 {
		// The operator retries once Kafka is back.
		code, text = adminPost(t, e.admin, "/admin/orders/cancel", body)
		t.Logf("retried cancel: %d %s", code, strings.TrimSpace(text))
	}
	if s := env.rd.stock(product); s != 5 {
		t.Errorf("stock %d after the retry, want still 5", s)
	}
	if !waitFor(5*time.Second, func() bool {
		n, err := env.rowCount("status = 2")
		return err == nil && n == 1
	}) {
		n, _ := env.rowCount("status = 2")
		t.Errorf("%d status-2 rows 5 s after the release, want 1: the release event is lost (stock is back in Redis, the ledger still holds the order)", n)
	}
	code, text = reconcileAdmin(t, e.admin)
	if want := "RECONCILE products=1 oversold=0 lost=0 duplicated=0"; code != 200 || lastLine(text) != want {
		t.Errorf("reconcile answered %d:\n%s\nwant %q", code, text, want)
	}
}
