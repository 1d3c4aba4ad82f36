package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/order"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
)

var seq atomic.Int64

type fixture struct {
	t     *testing.T
	st    *stock.Store
	srv   *redistest.Server
	store *orderstore.File
}

func newFixture(t *testing.T) *fixture {
	srv := redistest.New(t)
	st := stocktest.Open(t, srv.Addr())
	fs, err := orderstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	return &fixture{t: t, st: st, srv: srv, store: fs}
}

// restartRedis is Redis losing its memory; the edge's client reconnects
// (a fresh one here, so that no connection from before answers EOF).
func (f *fixture) restartRedis() {
	f.t.Helper()
	f.srv.Restart()
	f.st = stocktest.Open(f.t, f.srv.Addr())
}

func (f *fixture) warm(p string, n int64, limit int) {
	f.t.Helper()
	now := time.Now()
	if _, err := f.st.Warm(context.Background(), stock.SaleStock{ProductID: p, Stock: n, Limit: limit, Price: 100,
		StartMs: now.UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli()}); err != nil {
		f.t.Fatal(err)
	}
}

// buy deducts for real and returns the row the consumer would store.
func (f *fixture) buy(p, user string, qty int) orderstore.Row {
	f.t.Helper()
	id := seq.Add(1)
	now := time.Now().UnixMilli()
	out, err := f.st.Deduct(context.Background(), stock.Attempt{
		Order: order.Order{
			ProductID: p, UserID: user, Qty: qty, ID: id, PriceCents: 100, CreatedMs: now, Edge: 1,
		},
		Limit: 1000, TokenNonceHex: strconv.FormatInt(id, 16), TokenExpiresMs: now + 60_000,
	})
	if err != nil || out.Code != stock.OK {
		f.t.Fatalf("deduct: %v %v", out, err)
	}
	return orderstore.Row{Status: orderstore.StatusUnpaid, UpdatedMs: now, Order: order.Order{
		ID: id, ProductID: p, UserID: user, Qty: qty, PriceCents: 100, CreatedMs: now, Edge: 1,
	}}
}

func (f *fixture) insert(rows ...orderstore.Row) {
	f.t.Helper()
	if err := f.store.Insert(context.Background(), rows); err != nil {
		f.t.Fatal(err)
	}
}

// clearOutbox is the edge deleting entries once Kafka acknowledged them.
func (f *fixture) clearOutbox(p string) {
	f.t.Helper()
	c := redistest.Client(f.t, f.st.Addr())
	if err := c.Do(context.Background(), c.B().Del().Key(stock.OutboxKey(p)).Build()).Error(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) run(products []string, opts ...Option) (Report, string, error) {
	rep, err := Run(context.Background(), f.st, f.store, products, nil, opts...)
	var b strings.Builder
	rep.Print(&b)
	f.t.Log("\n" + b.String())
	return rep, b.String(), err
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func TestClean(t *testing.T) {
	f := newFixture(t)
	f.warm("a", 10, 2)
	var rows []orderstore.Row
	for i := range 5 {
		rows = append(rows, f.buy("a", fmt.Sprint("u", i), 2))
	}
	f.insert(rows...)
	f.clearOutbox("a")
	rep, out, err := f.run(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := lastLine(out); got != "RECONCILE products=1 oversold=0 lost=0 duplicated=0" {
		t.Fatalf("last line %q", got)
	}
	p := rep.Products[0]
	if p.Deducted != 10 || p.HeldUnits() != 10 || p.Remaining != 0 || p.MaxUserUnits != 2 {
		t.Fatalf("%+v", p)
	}
}

func TestPendingOutboxIsNotLost(t *testing.T) {
	f := newFixture(t)
	f.warm("a", 10, 5)
	stored := f.buy("a", "u1", 1)
	f.insert(stored)
	f.buy("a", "u2", 3) // deducted, its event still in the outbox
	rep, _, err := f.run([]string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if p := rep.Products[0]; p.OutboxEntries != 2 || p.PendingUnits != 3 {
		t.Fatalf("outbox %d pending %d: the stored order's entry is not pending", p.OutboxEntries, p.PendingUnits)
	}
}

func TestLost(t *testing.T) {
	f := newFixture(t)
	f.warm("a", 10, 5)
	f.insert(f.buy("a", "u1", 1))
	f.buy("a", "u2", 3) // acknowledged, outbox entry gone, never stored
	f.clearOutbox("a")
	rep, out, err := f.run(nil)
	if err == nil || rep.Lost != 3 || rep.Oversold != 0 || rep.Duplicated != 0 {
		t.Fatalf("report %+v, err %v: want lost=3", rep, err)
	}
	if lastLine(out) != "RECONCILE products=1 oversold=0 lost=3 duplicated=0" {
		t.Fatalf("last line %q", lastLine(out))
	}
}

func TestLostRelease(t *testing.T) {
	f := newFixture(t)
	f.warm("a", 10, 5)
	r := f.buy("a", "u1", 2)
	f.insert(r)
	f.clearOutbox("a")
	if ok, err := f.st.Release(context.Background(), "a", r.ID); !ok || err != nil {
		t.Fatal(ok, err)
	}
	// Redis released it, the release event never reached the ledger.
	if rep, _, err := f.run(nil); err == nil || rep.Lost != 2 {
		t.Fatalf("report %+v, err %v: want lost=2 (the release)", rep, err)
	}
	r.Status, r.UpdatedMs = orderstore.StatusCancelled, r.UpdatedMs+1
	f.insert(r)
	if _, _, err := f.run(nil); err != nil {
		t.Fatalf("after the release is stored: %v", err)
	}
}

func TestDuplicated(t *testing.T) {
	f := newFixture(t)
	f.warm("a", 10, 5)
	f.insert(f.buy("a", "u1", 1))
	f.clearOutbox("a")
	// A row Redis never deducted.
	f.insert(orderstore.Row{Status: 1, UpdatedMs: 1, Order: order.Order{
		ID: seq.Add(1), ProductID: "a", UserID: "u9", Qty: 1, PriceCents: 1, CreatedMs: 1,
	}})
	if rep, _, err := f.run(nil); err == nil || rep.Duplicated != 1 || rep.Lost != 0 {
		t.Fatalf("report %+v, err %v: want duplicated=1", rep, err)
	}
}

func TestOversold(t *testing.T) {
	t.Run("UserOverLimit", func(t *testing.T) {
		f := newFixture(t)
		f.warm("a", 10, 2)
		f.insert(f.buy("a", "greedy", 2), f.buy("a", "greedy", 1)) // Limit 1000 in the attempt, 2 in the sale
		f.clearOutbox("a")
		if rep, _, err := f.run(nil); err == nil || rep.Oversold != 1 {
			t.Fatalf("report %+v, err %v: want oversold=1", rep, err)
		}
	})
	t.Run("RedisLostMemoryAndNoLedger", func(t *testing.T) {
		f := newFixture(t)
		f.warm("a", 4, 5)
		var rows []orderstore.Row
		for i := range 4 {
			rows = append(rows, f.buy("a", fmt.Sprint("u", i), 1))
		}
		f.insert(rows...)
		f.restartRedis() // memory gone; a warm-up that ignores the ledger reopens the full stock
		now := time.Now()
		await.Until(t, 10*time.Second, "the condition", func() bool {
			_, err := f.st.Warm(context.Background(), stock.SaleStock{ProductID: "a", Stock: 4, Limit: 5, Price: 100, StartMs: now.UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli()})
			return err == nil
		})
		for i := range 4 {
			f.insert(f.buy("a", fmt.Sprint("v", i), 1))
		}
		f.clearOutbox("a")
		rep, _, err := f.run(nil)
		if err == nil || rep.Oversold != 4 {
			t.Fatalf("report %+v, err %v: want oversold=4", rep, err)
		}
	})
	t.Run("RedisLostMemoryWarmedFromLedger", func(t *testing.T) {
		f := newFixture(t)
		f.warm("a", 4, 5)
		f.insert(f.buy("a", "u", 1), f.buy("a", "v", 1))
		f.restartRedis()
		sold, _ := orderstore.Ledger{Store: f.store}.Sold(context.Background(), "a")
		now := time.Now()
		// What sale's warm-up does: initial from config, stock = initial - sold.
		await.Until(t, 10*time.Second, "the condition", func() bool {
			_, err := f.st.Warm(context.Background(), stock.SaleStock{ProductID: "a", Initial: 4, Stock: 4 - sold, Limit: 5, Price: 100, StartMs: now.UnixMilli(), EndMs: now.Add(time.Hour).UnixMilli()})
			return err == nil
		})
		f.insert(f.buy("a", "w", 2))
		f.clearOutbox("a")
		if _, _, err := f.run(nil); err != nil {
			t.Fatal(err)
		}
	})
}

// A product the ledger has rows for and Redis has no stock key for: the
// sale was lost and nothing rebuilt it. An error with a line naming it;
// the totals stay what they are, and a sale never opened is no error.
func TestLedgerProductWithoutStockKeyFails(t *testing.T) {
	f := newFixture(t)
	f.warm("kept", 10, 5)
	f.insert(f.buy("kept", "u", 1))
	f.clearOutbox("kept")
	f.insert(orderstore.Row{Status: 1, UpdatedMs: 1, Order: order.Order{
		ID: seq.Add(1), ProductID: "gone", UserID: "u", Qty: 1, CreatedMs: 1,
	}})
	rep, out, err := f.run(nil)
	if err == nil || !strings.Contains(err.Error(), "gone") || !strings.Contains(err.Error(), "no stock key") {
		t.Fatalf("err = %v, want one naming the product without a stock key", err)
	}
	if rep.Clean() || len(rep.Missing) != 1 || rep.Missing[0] != "gone" || !strings.Contains(out, "not warmed") {
		t.Fatalf("report %+v", rep)
	}
	if !strings.Contains(out, "ERROR: product gone: the ledger holds 1 order(s) (0 released) but Redis has no stock key sk:{gone}:stock") {
		t.Fatalf("no ERROR line for the lost product:\n%s", out)
	}
	if lastLine(out) != "RECONCILE products=2 oversold=0 lost=0 duplicated=0" {
		t.Fatalf("last line %q", lastLine(out))
	}

	// Asked about a sale Redis has never had and the ledger does not know
	// (an upcoming one not warmed yet): reported, no error.
	if rep, _, err := f.run([]string{"kept", "new"}); err != nil || rep.Products[1].Warmed || rep.Products[1].Missing {
		t.Fatalf("a product unknown to both: %+v %v", rep, err)
	}
}

func TestSettleWaitsForThePipeline(t *testing.T) {
	f := newFixture(t)
	f.warm("a", 10, 5)
	r := f.buy("a", "u1", 1)
	f.clearOutbox("a")
	go func() {
		time.Sleep(300 * time.Millisecond)
		f.store.Insert(context.Background(), []orderstore.Row{r}) // the consumer catching up
	}()
	if _, _, err := f.run([]string{"a"}, WithRetry(5*time.Second, 50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
}

func TestDrainFailureIsAnError(t *testing.T) {
	f := newFixture(t)
	f.warm("a", 10, 5)
	lagging := errors.New("37 events not stored")
	rep, out, err := f.run([]string{"a"}, WithDrain(func(ctx context.Context) error { <-ctx.Done(); return lagging }, 100*time.Millisecond))
	if err == nil || rep.Drained || !strings.Contains(out, "WARNING: pipeline not drained") {
		t.Fatalf("%v\n%s", err, out)
	}
	if lastLine(out) != "RECONCILE products=1 oversold=0 lost=0 duplicated=0" {
		t.Fatalf("last line %q", lastLine(out))
	}
}

// A fenced sale (Redis went back in time, not rebuilt yet): its figures
// come from a server nobody has checked against the ledger, so the report
// is not clean and names it.
func TestFencedProductFails(t *testing.T) {
	f := newFixture(t)
	f.warm("fz", 10, 5)
	f.insert(f.buy("fz", "u", 1))
	f.clearOutbox("fz")
	if _, _, err := f.run(nil); err != nil {
		t.Fatalf("before the fence: %v", err)
	}
	fence, err := f.st.Fence(context.Background(), "fz", stock.FenceID(time.Now().UnixMilli(), 3, "lost"))
	if err != nil {
		t.Fatal(err)
	}
	rep, out, err := f.run(nil)
	if err == nil || !strings.Contains(err.Error(), "fenced") || rep.Clean() || len(rep.Fenced) != 1 || rep.Fenced[0] != "fz" {
		t.Fatalf("err = %v, report %+v", err, rep)
	}
	if !strings.Contains(out, "ERROR: product fz: fenced ("+fence+")") {
		t.Fatalf("no ERROR line for the fenced product:\n%s", out)
	}
}

// TestPaidUnpaidCancelledExpired: an order paid, one cancelled, one
// released by its deadline and one still unpaid reconcile clean once
// their events are stored, each counted by its status; a missing paid
// event, or an expiry stored as a cancel, is lost.
func TestPaidUnpaidCancelledExpired(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.warm("d", 10, 5)
	buy := func(user string, qty int, payIn time.Duration) orderstore.Row {
		t.Helper()
		id := seq.Add(1)
		now := time.Now().UnixMilli()
		o := order.Order{ProductID: "d", UserID: user, Qty: qty, ID: id, PriceCents: 100, CreatedMs: now, Edge: 1,
			PayByMs: now + payIn.Milliseconds()}
		out, err := f.st.Deduct(ctx, stock.Attempt{Order: o, Limit: 1000, TokenNonceHex: strconv.FormatInt(id, 16), TokenExpiresMs: now + 60_000})
		if err != nil || out.Code != stock.OK {
			t.Fatalf("deduct: %v %v", out, err)
		}
		if _, err := f.st.MarkSuccess(ctx, "d", id); err != nil {
			t.Fatal(err)
		}
		e := order.Event{V: 1, Type: order.TypeOrder, Order: o}
		return orderstore.FromEvent(&e)
	}
	paid, unpaid, cancelled := buy("pa", 1, time.Hour), buy("un", 2, time.Hour), buy("ca", 1, time.Hour)
	expired := buy("ex", 3, 200*time.Millisecond)
	f.insert(paid, unpaid, cancelled, expired)
	p, err := f.st.Pay(ctx, "d", paid.ID, "", 0)
	if err != nil || p.Info.State != stock.StatePaid {
		t.Fatalf("pay: %+v %v", p, err)
	}
	c, err := f.st.Cancel(ctx, "d", cancelled.ID)
	if err != nil || !c.Changed {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	var gone []stock.Settlement
	await.Until(t, 10*time.Second, "the deadline released the order", func() bool {
		s, err := f.st.ExpireDue(ctx, "d", 10)
		gone = append(gone, s...)
		return err == nil && len(gone) > 0
	})
	if len(gone) != 1 || gone[0].Info.ID != expired.ID {
		t.Fatalf("expired %+v", gone)
	}
	f.clearOutbox("d")
	row := func(s stock.Settlement) orderstore.Row { e := s.Event(); return orderstore.FromEvent(&e) }

	// The paid event never stored, the expiry stored as a cancel: lost.
	wrong := row(gone[0])
	wrong.Expired = false
	f.insert(row(c), wrong)
	rep, _, err := f.run([]string{"d"})
	if err == nil || rep.Lost != 4 || rep.Oversold != 0 || rep.Duplicated != 0 {
		t.Fatalf("report %+v, %v: want lost=4 (1 paid, 3 expired stored as cancelled)", rep, err)
	}

	f.insert(row(p), row(gone[0]))
	rep, out, err := f.run([]string{"d"})
	if err != nil {
		t.Fatal(err)
	}
	want := Product{ProductID: "d", Warmed: true, Initial: 10, ReleasedMeta: 4, PaidMeta: 1, ExpiredMeta: 3, Remaining: 7,
		Limit: 5, Deducted: 7, Net: 3, UnpaidOrders: 1, UnpaidUnits: 2, PaidOrders: 1, PaidUnits: 1, CancelledOrders: 1,
		CancelledUnits: 1, ExpiredOrders: 1, ExpiredUnits: 3, MaxUser: "un", MaxUserUnits: 2}
	if got := rep.Products[0]; got != want {
		t.Fatalf("product\n got %+v\nwant %+v", got, want)
	}
	// I + R = paid + unpaid + remaining.
	if want.Initial != want.PaidUnits+want.UnpaidUnits+want.Remaining {
		t.Fatal("the identity does not hold")
	}
	for _, col := range []string{"paid", "expired", "unpaid", "paid.units", "cancelled.units", "expired.units"} {
		if !strings.Contains(strings.SplitN(out, "\n", 2)[0], col) {
			t.Errorf("the report's header does not name %q", col)
		}
	}
}
