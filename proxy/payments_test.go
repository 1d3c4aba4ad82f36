package proxy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"flashgate/internal/await"
	"flashgate/internal/kafkatest"
	"flashgate/internal/redistest"
	"flashgate/orders/order"
	"flashgate/orders/stock"
	"flashgate/sale/payhook"
)

const webhookSecret = "webhook-secret-0123456789abcdefghij"

// payEdge is an edge on its own Redis with two sales (p1, p2) and the
// payment webhook on; orders are made on its store directly, with the
// deadline the test needs.
func payEdge(t *testing.T) *edge {
	t.Helper()
	redis := redistest.Start(t)
	cfg := fmt.Sprintf(baseConfig, "1000r/s", 1000, startOrigin(t)) + fmt.Sprintf(`
redis:
  addr: "%s"
payments:
  webhook_secret: "%s"
  webhook_tolerance: 1m
activities:
  - {product_id: p1, name: "One", price: "1.00", stock: 10, limit: 5, start: "+0s", end: "+1h"}
  - {product_id: p2, name: "Two", price: "1.00", stock: 10, limit: 5, start: "+0s", end: "+1h"}
`, redis, webhookSecret)
	return startEdge(t, cfg)
}

var paySeq atomic.Int64

func init() { paySeq.Store(time.Now().UnixNano() / 1000) }

// placeOrder deducts one unit of product whose deadline is payIn from now
// (negative: already past).
func placeOrder(t *testing.T, e *edge, product string, payIn time.Duration) string {
	t.Helper()
	id := paySeq.Add(1)
	now := time.Now().UnixMilli()
	created := now - 10_000
	a := stock.Attempt{
		Order: order.Order{ID: id, ProductID: product, UserID: "u" + strconv.FormatInt(id, 10), Qty: 1, PriceCents: 100,
			CreatedMs: created, PayByMs: now + payIn.Milliseconds(), Edge: 1},
		Limit: 5, TokenNonceHex: strconv.FormatInt(id, 16), TokenExpiresMs: now + 60_000,
	}
	out, err := e.srv.Store().Deduct(context.Background(), a)
	if err != nil || out.Code != stock.OK {
		t.Fatalf("deduct: %+v %v", out, err)
	}
	return strconv.FormatInt(id, 10)
}

func orderBody(product, id string) string {
	return `{"productId":"` + product + `","orderId":"` + id + `"}`
}

func remaining(t *testing.T, e *edge, product string) int64 {
	t.Helper()
	n, _, err := e.srv.Store().Remaining(context.Background(), product)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAdminOrdersPaid: paid in time answers paid (again on a repeat, with
// "already"); past the deadline the same call expires the order and says
// so, and the unit is back; an unknown order, another sale's order and bad
// input are refused and change nothing; a paid order cannot be cancelled.
func TestAdminOrdersPaid(t *testing.T) {
	e := payEdge(t)
	paid := placeOrder(t, e, "p1", time.Hour)
	late := placeOrder(t, e, "p1", -time.Second)
	if n := remaining(t, e, "p1"); n != 8 {
		t.Fatalf("remaining %d after two orders", n)
	}

	code, body := post(t, e.adminBase+"/admin/orders/paid", orderBody("p1", paid))
	if code != 200 || !strings.Contains(body, `"status":"paid"`) || !strings.Contains(body, `"already":false`) {
		t.Fatalf("paid: %d %s", code, body)
	}
	code, body = post(t, e.adminBase+"/admin/orders/paid", orderBody("p1", paid))
	if code != 200 || !strings.Contains(body, `"already":true`) {
		t.Fatalf("paid again: %d %s", code, body)
	}
	code, body = post(t, e.adminBase+"/admin/orders/cancel", orderBody("p1", paid))
	if code != 409 || !strings.Contains(body, "ORDER_PAID") {
		t.Fatalf("cancel of a paid order: %d %s", code, body)
	}

	code, body = post(t, e.adminBase+"/admin/orders/paid", orderBody("p1", late))
	if code != 409 || !strings.Contains(body, `"code":"TOO_LATE"`) || !strings.Contains(body, `"status":"expired"`) {
		t.Fatalf("paid past the deadline: %d %s", code, body)
	}
	if n := remaining(t, e, "p1"); n != 9 {
		t.Fatalf("remaining %d after the late payment, want the unit back (9)", n)
	}
	// Still too late on a repeat, and nothing more comes back.
	if code, body = post(t, e.adminBase+"/admin/orders/paid", orderBody("p1", late)); code != 409 || !strings.Contains(body, `"status":"expired"`) {
		t.Fatalf("late payment again: %d %s", code, body)
	}
	cancelled := placeOrder(t, e, "p1", time.Hour)
	if code, body := post(t, e.adminBase+"/admin/orders/cancel", orderBody("p1", cancelled)); code != 200 {
		t.Fatalf("cancel: %d %s", code, body)
	}
	if code, body = post(t, e.adminBase+"/admin/orders/paid", orderBody("p1", cancelled)); code != 409 || !strings.Contains(body, `"status":"cancelled"`) {
		t.Fatalf("paying a cancelled order: %d %s", code, body)
	}

	before := remaining(t, e, "p1")
	other := placeOrder(t, e, "p2", time.Hour)
	for _, c := range []struct {
		body string
		code int
	}{
		{orderBody("p1", "12345"), 404}, // unknown
		{orderBody("p1", other), 404},   // another sale's order
		{orderBody("p1/x", paid), 400},  // bad product id
		{`{"productId":"p1"}`, 400},     // no order
		{`{"productId":"p1","orderId":"-3"}`, 400},
	} {
		if code, body := post(t, e.adminBase+"/admin/orders/paid", c.body); code != c.code {
			t.Errorf("paid %s: %d %s, want %d", c.body, code, body, c.code)
		}
	}
	if n := remaining(t, e, "p1"); n != before {
		t.Errorf("refused payments changed the stock: %d, was %d", n, before)
	}
	info, _, _ := e.srv.Store().OrderState(context.Background(), "p2", mustInt(t, other))
	if info.State == stock.StatePaid {
		t.Error("paying p2's order as p1's paid it")
	}

	// The metrics say it: one paid here, one expired by a late payment,
	// and the sale's units (sampled): 1 paid, 1 expired, the rest held.
	held := 10 - before - 1 // p1's units neither left nor paid
	await.Until(t, 10*time.Second, "the payment metrics", func() bool {
		_, _, m := get(t, e.adminBase+"/metrics")
		return strings.Contains(m, "flashgate_orders_paid_total 1\n") &&
			strings.Contains(m, "flashgate_orders_expired_total 1\n") &&
			strings.Contains(m, `flashgate_orders_paid{product="p1"} 1`+"\n") &&
			strings.Contains(m, `flashgate_orders_expired{product="p1"} 1`+"\n") &&
			strings.Contains(m, fmt.Sprintf(`flashgate_orders_unpaid{product="p1"} %d`+"\n", held))
	})
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPaymentWebhook: a signed, fresh call pays the order; a bad
// signature, a stale or future timestamp and a replayed id are refused,
// and change nothing.
func TestPaymentWebhook(t *testing.T) {
	e := payEdge(t)
	id := placeOrder(t, e, "p1", time.Hour)
	call := func(ts int64, sig, body string) (int, string) {
		return post(t, e.base+"/api/payments/webhook", body,
			payhook.HeaderTimestamp, strconv.FormatInt(ts, 10), payhook.HeaderSignature, sig)
	}
	body := `{"id":"evt_1","type":"payment.succeeded","productId":"p1","orderId":"` + id + `"}`
	now := time.Now().Unix()
	sign := func(ts int64, b string) string { return payhook.Sign([]byte(webhookSecret), ts, []byte(b)) }

	for _, c := range []struct {
		name string
		ts   int64
		sig  string
		code int
		want string
	}{
		{"no signature", now, "", 401, "BAD_SIGNATURE"},
		{"another secret", now, payhook.Sign([]byte(strings.Repeat("x", 40)), now, []byte(body)), 401, "BAD_SIGNATURE"},
		{"too old", now - 120, sign(now-120, body), 400, "too old"},
		{"in the future", now + 120, sign(now+120, body), 400, "in the future"},
	} {
		if code, got := call(c.ts, c.sig, body); code != c.code || !strings.Contains(got, c.want) {
			t.Errorf("%s: %d %s, want %d %s", c.name, code, got, c.code, c.want)
		}
	}
	info, _, _ := e.srv.Store().OrderState(context.Background(), "p1", mustInt(t, id))
	if info.State == stock.StatePaid {
		t.Fatal("a refused webhook paid the order")
	}
	code, got := call(now, sign(now, body), body)
	if code != 200 || !strings.Contains(got, `"status":"paid"`) {
		t.Fatalf("signed webhook: %d %s", code, got)
	}
	if code, got = call(now, sign(now, body), body); code != 409 || !strings.Contains(got, "REPLAYED") {
		t.Fatalf("replayed webhook: %d %s", code, got)
	}
	other := `{"id":"evt_2","type":"payment.refunded","productId":"p1","orderId":"` + id + `"}`
	if code, got = call(now, sign(now, other), other); code != 200 || !strings.Contains(got, "ignored") {
		t.Fatalf("another event type: %d %s", code, got)
	}
	bad := `{"id":"has space","type":"payment.succeeded","productId":"p1","orderId":"` + id + `"}`
	if code, got = call(now, sign(now, bad), bad); code != 400 {
		t.Fatalf("bad event id: %d %s", code, got)
	}
}

// TestAdminActivityPayTimeout: an admin-created sale keeps its own pay
// timeout (in the durable catalogue's record of it too); a bad one is
// refused naming the field.
func TestAdminActivityPayTimeout(t *testing.T) {
	e := payEdge(t)
	for _, c := range []struct{ body, want string }{
		{`{"productId":"p9","name":"X","price":"1.00","stock":5,"limit":1,"start":"+0s","end":"+1h","payTimeout":"-1s"}`, "pay_timeout"},
		{`{"productId":"p9","name":"X","price":"1.00","stock":5,"limit":1,"start":"+0s","end":"+1h","payTimeout":"10ms"}`, "pay_timeout"},
		{`{"productId":"p9","name":"X","price":"1.00","stock":5,"limit":1,"start":"+0s","end":"+1h","payTimeout":"10000h"}`, "order_ttl"},
		{`{"productId":"p9","name":"X","price":"1.00","stock":5,"limit":1,"start":"+0s","end":"+1h","payTimeout":"soon"}`, "payTimeout"},
	} {
		if code, body := post(t, e.adminBase+"/admin/activities", c.body); code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want 400 naming %s", c.body, code, body, c.want)
		}
	}
	if _, ok := e.srv.env.Sales.GetString("p9"); ok {
		t.Fatal("a refused sale was created")
	}
	if code, body := post(t, e.adminBase+"/admin/activities", `{"productId":"p9","name":"X","price":"1.00","stock":5,"limit":1,"start":"+0s","end":"+1h","payTimeout":"90s"}`); code != 200 {
		t.Fatalf("create: %d %s", code, body)
	}
	a, ok := e.srv.env.Sales.GetString("p9")
	if !ok || a.PayTimeout(0) != 90_000 {
		t.Fatalf("p9's pay timeout: %v %+v, want 90s", ok, a.Sale)
	}
	if _, _, list := get(t, e.adminBase+"/admin/activities"); !strings.Contains(list, `"productId":"p9"`) || !strings.Contains(list, `"payTimeoutMs":90000`) {
		t.Errorf("GET /admin/activities does not show p9's pay timeout: %s", list)
	}
	entry, err := e.srv.Store().Catalog(context.Background())
	if err != nil {
		t.Fatalf("catalog: %v", err)
	}
	if doc := entry["p9"].Activity; !strings.Contains(doc, `"PayTimeoutMs":90000`) {
		t.Errorf("the catalogue's record of p9 lacks its pay timeout: %s", doc)
	}
}

// TestPaidWhileKafkaIsDown: Redis decides the payment; Kafka refusing the
// paid event makes the answer 503 saying so (the order stays paid, a
// cancel is refused), and the retry once Kafka is back answers paid.
func TestPaidWhileKafkaIsDown(t *testing.T) {
	brokers, c := kafkatest.Start(t)
	var down atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if down.Load() {
			return nil, errors.New("kafka is down (the test)"), true
		}
		return nil, nil, false
	})
	redis := redistest.Start(t)
	cfg := fmt.Sprintf(baseConfig, "1000r/s", 1000, startOrigin(t)) + fmt.Sprintf(`
redis:
  addr: "%s"
kafka:
  brokers: [%q]
  timeout: 500ms
orders:
  consumer: false
  relay_min_age: 1m
activities:
  - {product_id: p1, name: "One", price: "1.00", stock: 10, limit: 5, start: "+0s", end: "+1h"}
`, redis, brokers[0])
	e := startEdge(t, cfg)
	id := placeOrder(t, e, "p1", time.Hour)

	down.Store(true)
	code, body := post(t, e.adminBase+"/admin/orders/paid", orderBody("p1", id))
	if code != 503 || !strings.Contains(body, "retrying is safe") {
		t.Fatalf("paid with Kafka down: %d %s, want 503 saying a retry is safe", code, body)
	}
	if info, _, _ := e.srv.Store().OrderState(context.Background(), "p1", mustInt(t, id)); info.State != stock.StatePaid {
		t.Fatalf("Redis decided nothing: %s", info.State)
	}
	if code, body := post(t, e.adminBase+"/admin/orders/cancel", orderBody("p1", id)); code != 409 {
		t.Fatalf("cancel of the order paid while Kafka was down: %d %s", code, body)
	}
	down.Store(false)
	code, body = post(t, e.adminBase+"/admin/orders/paid", orderBody("p1", id))
	if code != 200 || !strings.Contains(body, `"already":true`) {
		t.Fatalf("retry once Kafka is back: %d %s", code, body)
	}
}
