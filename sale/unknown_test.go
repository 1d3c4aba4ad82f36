package sale

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/orders/stock"
	"flashgate/sale/api"
)

// TestRefusedDeductionIsNotSent: with Redis stopped, a purchase whose call
// is refused at the dial did not happen. It is answered a plain 503 (no
// order to follow), logged as not sent with a known outcome, and counted
// by the product's breaker: Redis is failing.
func TestRefusedDeductionIsNotSent(t *testing.T) {
	brks := NewBreakers(1000, time.Hour, nil, nil)
	r := newDoRig(t, stock.Options{Timeout: 500 * time.Millisecond}, brks, "nr")
	if code := r.do("nr", "warmup"); code != 200 {
		t.Fatalf("warm-up purchase: %d", code)
	}
	r.srv.Stop()

	// The connection the stop broke may take one more write before the
	// client notices; from then on every call dials and is refused.
	var code int
	var body string
	i := 0
	await.Until(t, 10*time.Second, "a purchase refused at the dial", func() bool {
		i++
		code, body = r.doBody("nr", "u"+strconv.Itoa(i))
		return strings.Contains(r.logs.String(), "connection refused")
	})
	if code != 503 || !strings.Contains(body, `"code":"DEGRADED"`) || strings.Contains(body, "orderId") {
		t.Errorf("refused purchase answered %d %s; want a plain 503 DEGRADED, no order to follow", code, body)
	}
	var line string
	for l := range strings.SplitSeq(r.logs.String(), "\n") {
		if strings.Contains(l, "connection refused") {
			line = l
		}
	}
	if !strings.Contains(line, `msg="deduction not sent"`) || !strings.Contains(line, "unknown_outcome=false") {
		t.Errorf("refused purchase logged %q; want \"deduction not sent\", unknown_outcome=false", line)
	}
	if got := brks.For("nr").consec.Load(); got < 1 {
		t.Errorf("breaker counted %d failures after a refused call, want it counted", got)
	}
}

// orderAnswer is an answer that names an order.
type orderAnswer struct {
	Code, Message, OrderID, ProductID, Status string
}

func parseOrderAnswer(t *testing.T, body string) orderAnswer {
	t.Helper()
	var a orderAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	return a
}

// result polls the order's result as its shopper: the status and body.
func (r *doRig) result(product, user, orderID string) (int, string) {
	id, err := strconv.ParseInt(orderID, 10, 64)
	if err != nil {
		panic(err)
	}
	req := &api.Call{Ctx: new(fasthttp.RequestCtx), NowNano: time.Now().UnixNano(), Endpoint: api.EndpointResult,
		UserID: []byte(user), ProductID: []byte(product), OrderID: id}
	r.svc.Handle(req)
	return req.Ctx.Response.StatusCode(), string(req.Ctx.Response.Body())
}

// TestUnknownOutcomeNamesTheOrder: Redis hangs (SIGSTOP) after a purchase
// was sent, so its call times out with the outcome unknown. The shopper is
// answered 503 with the order id already made (status "unknown"), not a
// bare 503. When Redis resumes, it runs the deduction it had received; the
// edge settles the attempt as placed, and the order's result call answers
// it: pending, the shopper's own.
func TestUnknownOutcomeNamesTheOrder(t *testing.T) {
	const budget = 300 * time.Millisecond
	r := newDoRig(t, stock.Options{Timeout: budget}, NewBreakers(1000, time.Hour, nil, nil), "uo")
	if code := r.do("uo", "warmup"); code != 200 {
		t.Fatalf("warm-up purchase: %d", code)
	}
	r.srv.Pause()
	defer r.srv.Resume()
	code, body := r.doBody("uo", "shopper")
	ans := parseOrderAnswer(t, body)
	if code != 503 || ans.Code != "DEGRADED" || ans.OrderID == "" || ans.ProductID != "uo" || ans.Status != "unknown" {
		t.Fatalf("purchase of unknown outcome answered %d %s; want 503 DEGRADED with the order id, status unknown", code, body)
	}
	if !strings.Contains(r.logs.String(), "unknown_outcome=true") {
		t.Errorf("the timed-out purchase was not logged as an unknown outcome:\n%s", r.logs)
	}
	// Redis hung: the result cannot be told yet.
	if code, body := r.result("uo", "shopper", ans.OrderID); code == 200 {
		t.Fatalf("result while Redis hangs: %d %s", code, body)
	}

	r.srv.Resume()
	await.Until(t, 10*time.Second, "the attempt settled", func() bool { return r.svc.unknownPending() == 0 })
	if got := r.svc.unknown.results[unknownPlaced].Value(); got != 1 {
		t.Fatalf("settled placed %d times, want 1 (Redis ran the deduction it had received); log:\n%s", got, r.logs)
	}
	code, body = r.result("uo", "shopper", ans.OrderID)
	if code != 200 || !strings.Contains(body, `"status":"pending"`) || !strings.Contains(body, `"orderId":"`+ans.OrderID+`"`) {
		t.Fatalf("result of the placed order: %d %s; want 200 pending", code, body)
	}
	if code, _ := r.result("uo", "someone-else", ans.OrderID); code != 404 {
		t.Fatalf("another shopper's result call: %d, want 404", code)
	}
}

// TestUnknownOutcomeNotPlacedReadsFailed: the script fails inside Redis
// (its product's stock key holds the wrong type), so the call's outcome is
// unknown. Nothing was written: the edge settles it as not placed, after
// which the order's result call answers failed, and the same attempt sent
// again (a deduction still on its way) cannot buy.
func TestUnknownOutcomeNotPlacedReadsFailed(t *testing.T) {
	r := newDoRig(t, stock.Options{}, NewBreakers(1000, time.Hour, nil, nil), "np")
	if code := r.do("np", "warmup"); code != 200 {
		t.Fatalf("warm-up purchase: %d", code)
	}
	rd := redistest.Client(t, r.srv.Addr())
	ctx := context.Background()
	key := stock.StockKey("np")
	left, err := rd.Do(ctx, rd.B().Get().Key(key).Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	rd.Do(ctx, rd.B().Del().Key(key).Build())
	rd.Do(ctx, rd.B().Hset().Key(key).FieldValue().FieldValue("broken", "1").Build())

	code, body := r.doBody("np", "shopper")
	ans := parseOrderAnswer(t, body)
	if code != 503 || ans.OrderID == "" || ans.Status != "unknown" {
		t.Fatalf("purchase whose script failed answered %d %s; want 503 with the order id, status unknown", code, body)
	}
	await.Until(t, 10*time.Second, "the attempt settled", func() bool { return r.svc.unknownPending() == 0 })
	if got := r.svc.unknown.results[unknownNotPlaced].Value(); got != 1 {
		t.Fatalf("settled not placed %d times, want 1; log:\n%s", got, r.logs)
	}
	code, body = r.result("np", "shopper", ans.OrderID)
	if code != 200 || !strings.Contains(body, `"status":"failed"`) {
		t.Fatalf("result of the order not placed: %d %s; want 200 failed", code, body)
	}

	// Repaired: the shopper buys with a new attempt; the fenced one stays
	// fenced (stock untouched by it).
	rd.Do(ctx, rd.B().Del().Key(key).Build())
	rd.Do(ctx, rd.B().Set().Key(key).Value(left).Build())
	if code := r.do("np", "shopper"); code != 200 {
		t.Fatalf("a new attempt after the repair: %d, want 200", code)
	}
}
