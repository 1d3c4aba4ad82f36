package sale

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/orderid"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/sale/api"
	"flashgate/sale/catalog"
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

// newStoredRig is a sale service of node 1 selling product (10 units,
// token_ttl 1m) on its own Redis, with an order store to ask (the
// embedded file store).
func newStoredRig(t *testing.T, product string, opts stock.Options) *doRig {
	t.Helper()
	srv := redistest.New(t)
	st := stocktest.Open(t, srv.Addr(), stocktest.WithOptions(opts))
	store, err := orderstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ids, _ := orderid.NewGenerator(1, func() int64 { return time.Now().UnixMilli() })
	logs := new(logBuffer)
	svc := New(Deps{Store: st, Sales: catalog.NewRegistry(), IDs: ids, Results: store, Node: 1,
		Breakers: NewBreakers(1000, time.Hour, nil, nil), Log: slog.New(slog.NewTextHandler(logs, nil))})
	now := time.Now()
	sale := &catalog.Sale{ProductID: product, Name: product, PriceCents: 100, Stock: 10, Limit: 1,
		StartMs: now.Add(-time.Hour).UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli()}
	if err := svc.Apply(context.Background(), &Settings{Catalog: []*catalog.Sale{sale}, TokenTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	return &doRig{srv: srv, st: st, svc: svc, logs: logs}
}

// TestResultSettlesOrphans: a result call that finds no order settles it
// as an orphan — failed, the sale then refusing the tokens minted before —
// only when the order id names an edge that ran and is gone (its heartbeat
// stale) or restarted after the order (or less than 5 s before it by the
// clocks, which may disagree), and the order is between 5 s and 5 min old,
// or at once when its edge's process handed it off at a graceful exit;
// any other id answers NOT_FOUND and writes nothing.
func TestResultSettlesOrphans(t *testing.T) {
	r := newStoredRig(t, "oh", stock.Options{})
	svc, st, now := r.svc, r.st, time.Now()
	ctx := context.Background()
	// Edge 2 beat until 10 s ago (gone); edge 3 beats now, started an hour
	// ago (alive: it follows its own); edge 4 beats now but started 2 s ago
	// (restarted: it forgot); edge 5 never ran.
	nowMs := now.UnixMilli()
	// Edge 6 beats now, restarted with its clock behind: its start reads
	// 2 s before the order (nemesis finding 10). Edge 7's last process
	// exited gracefully 1 s ago and handed its unsettled ones off; the one
	// after it beats now.
	for _, b := range []struct{ node, last, start int64 }{{2, nowMs - 10_000, nowMs - 3_600_000}, {3, nowMs, nowMs - 3_600_000},
		{4, nowMs, nowMs - 2_000}, {6, nowMs, nowMs - 8_000}, {7, nowMs, nowMs - 3_600_000}} {
		if err := st.Heartbeat(ctx, int(b.node), b.last, b.start); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.EdgeStopped(ctx, 7, nowMs-1_000); err != nil {
		t.Fatal(err)
	}
	idOf := func(node int, ago time.Duration) int64 {
		g, err := orderid.NewGenerator(node, func() int64 { return now.Add(-ago).UnixMilli() })
		if err != nil {
			t.Fatal(err)
		}
		return g.Next()
	}
	result := func(id int64) (int, string) {
		req := &api.Call{Ctx: new(fasthttp.RequestCtx), NowNano: time.Now().UnixNano(), Endpoint: api.EndpointResult,
			UserID: []byte("shopper"), ProductID: []byte("oh"), OrderID: id}
		svc.Handle(req)
		return req.Ctx.Response.StatusCode(), string(req.Ctx.Response.Body())
	}
	for _, tc := range []struct {
		name   string
		id     int64
		failed bool
	}{
		{"gone edge, 6 s old", idOf(2, 6*time.Second), true},
		{"restarted edge, 6 s old", idOf(4, 6*time.Second), true},
		{"edge restarted with its clock behind, 6 s old", idOf(6, 6*time.Second), true},
		{"handed off at its edge's exit, 2 s old", idOf(7, 2*time.Second), true},
		{"made after its edge's exit, 0.5 s old", idOf(7, 500*time.Millisecond), false},
		{"gone edge, 2 s old", idOf(2, 2*time.Second), false},
		{"gone edge, 10 min old", idOf(2, 10*time.Minute), false},
		{"live edge", idOf(3, 6*time.Second), false},
		{"edge that never ran", idOf(5, 6*time.Second), false},
	} {
		code, body := result(tc.id)
		if tc.failed && (code != 200 || !strings.Contains(body, `"status":"failed"`)) {
			t.Errorf("%s: %d %s, want 200 failed", tc.name, code, body)
		}
		if !tc.failed && code != 404 {
			t.Errorf("%s: %d %s, want 404", tc.name, code, body)
		}
	}
	// The settlement refused the tokens minted before it (expiring within
	// the token life from now); one minted after still buys.
	buy := func(user string, tokenExp time.Time) (int, string) {
		req := &api.Call{Ctx: new(fasthttp.RequestCtx), NowNano: time.Now().UnixNano(), Endpoint: api.EndpointDo,
			UserID: []byte(user), ProductID: []byte("oh"), Qty: 1, TokenExpiresMs: tokenExp.UnixMilli(), Checked: api.TokenValid}
		binary.BigEndian.PutUint64(req.TokenNonce[:], nonceSeq.Add(1))
		svc.Handle(req)
		return req.Ctx.Response.StatusCode(), string(req.Ctx.Response.Body())
	}
	if code, body := buy("older", now.Add(30*time.Second)); code != 403 || !strings.Contains(body, "BAD_TOKEN") {
		t.Errorf("a token minted before the settlement: %d %s, want 403 BAD_TOKEN", code, body)
	}
	if code, body := buy("newer", time.Now().Add(2*time.Minute)); code != 200 {
		t.Errorf("a token minted after the settlement: %d %s, want 200", code, body)
	}
}

// TestPlacedUnknownFollowedUntilStored (nemesis seed 202): a purchase of
// unknown outcome found placed in Redis is followed until the order store
// has it. When Redis then loses the order before its event left the outbox
// (here: the order deleted, as a lagging replica's promotion loses it), the
// edge settles it again — failed — instead of leaving the shopper, who
// read "pending", with NOT_FOUND for good.
func TestPlacedUnknownFollowedUntilStored(t *testing.T) {
	r := newStoredRig(t, "pf", stock.Options{Timeout: 300 * time.Millisecond})
	srv, svc, logs := r.srv, r.svc, r.logs
	if code := r.do("pf", "warmup"); code != 200 {
		t.Fatalf("warm-up purchase: %d", code)
	}
	srv.Pause()
	code, body := r.doBody("pf", "shopper")
	srv.Resume()
	ans := parseOrderAnswer(t, body)
	if code != 503 || ans.Status != "unknown" {
		t.Fatalf("purchase while Redis hangs: %d %s, want 503 unknown", code, body)
	}
	await.Until(t, 10*time.Second, "the edge found the attempt placed", func() bool {
		return strings.Contains(logs.String(), "purchase of unknown outcome placed") ||
			strings.Contains(logs.String(), "purchase of unknown outcome settled: placed")
	})
	if code, body := r.result("pf", "shopper", ans.OrderID); code != 200 || !strings.Contains(body, `"status":"pending"`) {
		t.Fatalf("result of the placed order: %d %s, want pending", code, body)
	}
	// Redis loses the order (and its event with the outbox, never sent).
	id, _ := strconv.ParseInt(ans.OrderID, 10, 64)
	rd := (&roomRig{t: t}).client(srv.Addr())
	ctx := context.Background()
	if err := rd.Do(ctx, rd.B().Hdel().Key(stock.OrderBucketKey("pf", id)).Field(ans.OrderID).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := rd.Do(ctx, rd.B().Del().Key(stock.OrderKey("pf", id)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "the lost order settled failed", func() bool {
		code, body := r.result("pf", "shopper", ans.OrderID)
		return code == 200 && strings.Contains(body, `"status":"failed"`)
	})
	if n := svc.unknown.results[unknownPlaced].Value(); n != 0 {
		t.Errorf("counted placed %d times for an order Redis lost before it was stored", n)
	}
}
