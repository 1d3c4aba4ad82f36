package sale_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/internal/stocktest"
	"flashgate/orders/order"
	"flashgate/orders/stock"
	"flashgate/sale/catalog"
)

// Redis comes back from a snapshot taken while deadlines were pending: since
// the snapshot one order was paid, one cancelled, one expired by the sweep
// (all stored), one bought (its hash and deadline lost) and one expired
// whose release event is still in the outbox only. The rebuild gives every
// order the ledger's state, puts the unpaid orders' deadlines back (an
// overdue one too, which the first sweep then releases), and the sale
// reconciles: nothing paid or released twice, nothing held by nobody.
func TestStaleSnapshotRebuildsDeadlines(t *testing.T) { eachStoreKind(t, testStaleSnapshotDeadlines) }

func testStaleSnapshotDeadlines(t *testing.T, kind string) {
	ctx := context.Background()
	const p, limit = "dl", 1
	srv, open, r := staleSnapshotSale(t, kind, p, 20, limit)
	buy := func(user string, payIn time.Duration) stock.Attempt {
		t.Helper()
		a := newAttempt(p, user, 1, limit)
		a.PayByMs = a.CreatedMs + payIn.Milliseconds()
		out, err := r.st.Deduct(ctx, a)
		if err != nil || out.Code != stock.OK {
			t.Fatalf("deduct %s: %+v %v", user, out, err)
		}
		if err := r.pub.PublishAndAck(ctx, order.Event{V: order.Version, Type: order.TypeOrder, Order: a.Order}, out.OutboxID); err != nil {
			t.Fatal(err)
		}
		return a
	}
	// publish sends a settlement's event as an edge does.
	publish := func(set stock.Settlement) {
		t.Helper()
		if err := r.pub.PublishAndAck(ctx, set.Event(), set.OutboxID); err != nil {
			t.Fatal(err)
		}
	}
	success := func(as ...stock.Attempt) {
		t.Helper()
		await.Until(t, 30*time.Second, "stored and marked success", func() bool {
			for _, a := range as {
				if o, _, _ := r.st.OrderState(ctx, p, a.ID); o.State != stock.StateSuccess {
					return false
				}
			}
			return true
		})
	}

	paid := buy("paid", time.Hour)
	cancelled := buy("cancelled", time.Hour)
	swept := buy("swept", 300*time.Millisecond)
	unsent := buy("unsent", 300*time.Millisecond) // expires, its release never leaves the outbox
	overdue := buy("overdue", 300*time.Millisecond)
	open1 := buy("open", time.Hour)
	success(paid, cancelled, swept, unsent, overdue, open1)
	time.Sleep(time.Until(time.UnixMilli(overdue.PayByMs + 5))) // the stimulus: the 300 ms deadlines pass
	set, err := r.st.Pay(ctx, p, unsent.ID, "", 0)
	if err != nil || set.Info.State != stock.StateExpired {
		t.Fatalf("late Pay = %+v, %v", set, err)
	}
	// "unsent": the edge died before publishing; its entry waits in the
	// outbox, where the snapshot keeps it. "overdue": nobody swept it.
	unsentEvent := set.Event()
	if err := srv.Save(); err != nil {
		t.Fatal(err)
	}

	// After the snapshot.
	if set, err = r.st.Pay(ctx, p, paid.ID, "evt_paid", time.Minute); err != nil || set.Info.State != stock.StatePaid {
		t.Fatalf("Pay = %+v, %v", set, err)
	}
	publish(set)
	if set, err = r.st.Cancel(ctx, p, cancelled.ID); err != nil || !set.Changed {
		t.Fatalf("Cancel = %+v, %v", set, err)
	}
	publish(set)
	if set, err = r.st.Pay(ctx, p, swept.ID, "", 0); err != nil || set.Info.State != stock.StateExpired {
		t.Fatalf("late Pay = %+v, %v", set, err)
	}
	publish(set)                   // "swept": expired, stored
	late := buy("late", time.Hour) // bought after the snapshot
	success(late)
	if err := r.drain(ctx); err != nil {
		t.Fatal(err)
	}

	// Redis restarts from the snapshot: paid, cancelled and swept are
	// success there, late does not exist, unsent's release is in the
	// outbox only.
	r.stopConsumer()
	srv.Stop()
	srv.Start()
	st2 := open()
	r.useStock(st2)
	r.startConsumer()
	if o, _, _ := st2.OrderState(ctx, p, paid.ID); o.State != stock.StateSuccess {
		t.Fatalf("paid after the restart: %s (the snapshot is not stale)", o.State)
	}

	// The first sweep on the stale server fences the sale (it would have
	// expired orders paid since); the edge rebuilds it.
	if _, err := st2.ExpireDue(ctx, p, 10); err == nil {
		t.Fatal("a sweep on the stale server went through")
	}
	if err := r.apply(); err != nil {
		t.Fatal(err)
	}
	await.NoError(t, 30*time.Second, "reopened", func() error {
		r.svc.Refresh(ctx, false)
		if info, ok, err := st2.SaleInfo(ctx, p); err != nil || !ok || info.Fence != "" {
			return fmt.Errorf("still closed: %+v %v %v", info, ok, err)
		}
		return nil
	})

	want := map[int64]string{
		paid.ID: stock.StatePaid, cancelled.ID: stock.StateReleased, swept.ID: stock.StateExpired,
		unsent.ID: stock.StateExpired, overdue.ID: stock.StateSuccess, open1.ID: stock.StateSuccess, late.ID: stock.StateSuccess,
	}
	for id, s := range want {
		if o, ok, _ := st2.OrderState(ctx, p, id); !ok || o.State != s {
			t.Errorf("order %d (%s): %+v %v, want %s", id, o.UserID, o.State, ok, s)
		}
	}
	ds, total, err := st2.NextDeadlines(ctx, p, 10)
	if err != nil || total != 3 {
		t.Fatalf("deadlines after the rebuild: %+v %d %v (want overdue, open, late)", ds, total, err)
	}
	// Held: paid, overdue, open, late.
	if info := r.info(p); info.Remaining != 20-4 || info.Paid != 1 || info.Expired != 2 || info.Released != 3 {
		t.Fatalf("rebuilt as %+v", info)
	}
	// The first sweep releases the overdue one, and only it.
	got, err := st2.ExpireDue(ctx, p, 10)
	if err != nil || len(got) != 1 || got[0].Info.ID != overdue.ID {
		t.Fatalf("first sweep = %+v, %v", got, err)
	}
	publish(got[0])
	// What the ledger knows is final stays final.
	if set, err := st2.Pay(ctx, p, paid.ID, "", 0); err != nil || set.Changed || set.Info.State != stock.StatePaid {
		t.Fatalf("Pay of the paid order = %+v, %v", set, err)
	}
	if set, err := st2.Cancel(ctx, p, swept.ID); err != nil || set.Changed {
		t.Fatalf("Cancel of the expired order = %+v, %v", set, err)
	}
	// The released units sell again, exactly.
	if c := r.code(p, "paid", 1, limit); c != stock.LimitReached {
		t.Errorf("paid buying again: %v", c)
	}
	// The old server's counts take the ledger's: swept and cancelled,
	// released after the snapshot, hold nothing and buy again; unsent's
	// release is in the outbox, and it counts.
	for _, u := range []string{"swept", "cancelled", "unsent"} {
		if c := r.code(p, u, 1, limit); c != stock.OK {
			t.Errorf("%s buying again after its release: %v", u, c)
		}
	}
	sold := r.sellOut(p, 30, limit)
	if sold != 20-4+1-3 {
		t.Errorf("sold %d after the rebuild, want %d", sold, 20-4+1-3)
	}
	// unsent's release reaches the store through the relay in production;
	// here the test sends it, then everything balances.
	if err := r.pub.Publish(ctx, unsentEvent); err != nil {
		t.Fatal(err)
	}
	r.reconcileClean(p)
}

// Redis comes back from a snapshot taken before two orders without a pay
// deadline were settled: one cancelled, one paid (both stored). Neither is
// in the due set or the outbox, so only the ledger knows their hashes are
// stale. A third, with a deadline, was published (its outbox entry gone)
// but not yet stored when the snapshot was taken: pending there, not due
// yet, and paid since. After the rebuild a cancel of any of them finds it
// final and returns no unit: a unit released twice would be sold twice.
func TestStaleSnapshotSettledWithoutDeadline(t *testing.T) {
	eachStoreKind(t, testStaleSettledWithoutDeadline)
}

func testStaleSettledWithoutDeadline(t *testing.T, kind string) {
	ctx := context.Background()
	const p, limit = "nd", 1
	srv, open, r := staleSnapshotSale(t, kind, p, 10, limit)
	cancelled, _ := r.buy(p, "cancelled", 1, limit)
	paid, _ := r.buy(p, "paid", 1, limit)
	kept, code := r.buy(p, "kept", 1, limit)
	if code != stock.OK {
		t.Fatalf("buy: %v", code)
	}
	await.Until(t, 30*time.Second, "stored and marked success", func() bool {
		for _, a := range []stock.Attempt{cancelled, paid, kept} {
			if o, _, _ := r.st.OrderState(ctx, p, a.ID); o.State != stock.StateSuccess || o.PayByMs != 0 {
				return false
			}
		}
		return true
	})
	r.stopConsumer() // the next order reaches Kafka, not the store, before the snapshot
	unstored := newAttempt(p, "unstored", 1, limit)
	unstored.PayByMs = unstored.CreatedMs + time.Hour.Milliseconds()
	if out, err := r.st.Deduct(ctx, unstored); err != nil || out.Code != stock.OK {
		t.Fatalf("deduct: %+v %v", out, err)
	} else if err := r.pub.PublishAndAck(ctx, order.Event{V: order.Version, Type: order.TypeOrder, Order: unstored.Order}, out.OutboxID); err != nil {
		t.Fatal(err)
	}
	// PublishAndAck removes the outbox entry in the background: the
	// snapshot must not hold it (this order is "published, not stored").
	await.Until(t, 10*time.Second, "the order's outbox entry acknowledged", func() bool {
		evs, err := r.st.OutboxEvents(ctx, p)
		return err == nil && len(evs) == 0
	})
	if err := srv.Save(); err != nil {
		t.Fatal(err)
	}
	r.startConsumer()
	await.Until(t, 30*time.Second, "stored and marked success", func() bool {
		o, _, _ := r.st.OrderState(ctx, p, unstored.ID)
		return o.State == stock.StateSuccess
	})

	// After the snapshot: settled, published, stored.
	set, err := r.st.Cancel(ctx, p, cancelled.ID)
	if err != nil || !set.Changed {
		t.Fatalf("Cancel = %+v, %v", set, err)
	}
	if err := r.pub.PublishAndAck(ctx, set.Event(), set.OutboxID); err != nil {
		t.Fatal(err)
	}
	for _, a := range []stock.Attempt{paid, unstored} {
		if set, err = r.st.Pay(ctx, p, a.ID, "", 0); err != nil || set.Info.State != stock.StatePaid {
			t.Fatalf("Pay = %+v, %v", set, err)
		}
		if err := r.pub.PublishAndAck(ctx, set.Event(), set.OutboxID); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.drain(ctx); err != nil {
		t.Fatal(err)
	}

	r.stopConsumer()
	srv.Stop()
	srv.Start()
	st2 := open()
	r.useStock(st2)
	r.startConsumer()
	for a, s := range map[stock.Attempt]string{cancelled: stock.StateSuccess, paid: stock.StateSuccess, unstored: stock.StatePending} {
		if o, _, _ := st2.OrderState(ctx, p, a.ID); o.State != s {
			t.Fatalf("order %s after the restart: %s, want %s (the snapshot is not stale)", a.UserID, o.State, s)
		}
	}
	if evs, err := st2.OutboxEvents(ctx, p); err != nil || len(evs) != 0 {
		t.Fatalf("outbox after the restart: %+v %v", evs, err)
	}
	if _, total, err := st2.NextDeadlines(ctx, p, 1); err != nil || total != 0 {
		t.Fatalf("due after the restart: %d %v", total, err)
	}
	// The stale server is found out by the first settle call: it fences
	// the sale and changes nothing; the edge rebuilds it.
	if set, err := st2.Cancel(ctx, p, cancelled.ID); err == nil {
		t.Fatalf("a cancel on the stale server went through: %+v", set)
	}
	if err := r.apply(); err != nil {
		t.Fatal(err)
	}
	await.NoError(t, 30*time.Second, "reopened", func() error {
		r.svc.Refresh(ctx, false)
		if info, ok, err := st2.SaleInfo(ctx, p); err != nil || !ok || info.Fence != "" {
			return fmt.Errorf("still closed: %+v %v %v", info, ok, err)
		}
		return nil
	})

	want := map[int64]string{cancelled.ID: stock.StateReleased, paid.ID: stock.StatePaid, unstored.ID: stock.StatePaid, kept.ID: stock.StateSuccess}
	for id, s := range want {
		if o, ok, _ := st2.OrderState(ctx, p, id); !ok || o.State != s {
			t.Errorf("order %d (%s): %s %v, want %s", id, o.UserID, o.State, ok, s)
		}
	}
	// Held: paid, unstored and kept.
	if info := r.info(p); info.Remaining != 10-3 || info.Released != 1 || info.Paid != 2 {
		t.Fatalf("rebuilt as %+v", info)
	}
	// A second cancel of either returns no unit.
	for _, a := range []stock.Attempt{cancelled, paid, unstored} {
		if set, err := st2.Cancel(ctx, p, a.ID); set.Changed {
			t.Errorf("cancel of %s after the rebuild released it again: %+v, %v", a.UserID, set, err)
		}
	}
	if set, err := st2.Pay(ctx, p, cancelled.ID, "", 0); err != nil || set.Changed || set.Info.State != stock.StateReleased {
		t.Errorf("Pay of the cancelled order = %+v, %v", set, err)
	}
	if info := r.info(p); info.Remaining != 10-3 || info.Released != 1 {
		t.Fatalf("after the repeated cancels: %+v", info)
	}
	// The unpaid one still cancels, once.
	set, err = st2.Cancel(ctx, p, kept.ID)
	if err != nil || !set.Changed {
		t.Fatalf("Cancel of the unpaid order = %+v, %v", set, err)
	}
	if err := r.pub.PublishAndAck(ctx, set.Event(), set.OutboxID); err != nil {
		t.Fatal(err)
	}
	if info := r.info(p); info.Remaining != 10-2 || info.Released != 2 {
		t.Fatalf("after the cancel of the unpaid order: %+v", info)
	}
	r.reconcileClean(p)
}

// Redis comes back from a snapshot taken before one order expired and two
// were cancelled: the old server's buyer counts still hold their units. The
// rebuild sets every count to what the ledger and the outbox say, lowered as
// well as raised: the shoppers whose orders went back buy again, one who
// holds a paid order cannot, and a purchase still in the outbox (deducted,
// not stored) keeps counting.
func TestStaleSnapshotLowersBuyerCounts(t *testing.T) { eachStoreKind(t, testStaleBuyerCounts) }

func testStaleBuyerCounts(t *testing.T, kind string) {
	ctx := context.Background()
	const p, limit = "bc", 2
	srv, open, r := staleSnapshotSale(t, kind, p, 20, limit)
	// buy is the edge's purchase with a pay deadline: the script, then the
	// event acknowledged; stored and marked success before it returns.
	buy := func(user string, qty int, payIn time.Duration) stock.Attempt {
		t.Helper()
		a := newAttempt(p, user, qty, limit)
		a.PayByMs = a.CreatedMs + payIn.Milliseconds()
		out, err := r.st.Deduct(ctx, a)
		if err != nil || out.Code != stock.OK {
			t.Fatalf("deduct %s: %+v %v", user, out, err)
		}
		if err := r.pub.PublishAndAck(ctx, order.Event{V: order.Version, Type: order.TypeOrder, Order: a.Order}, out.OutboxID); err != nil {
			t.Fatal(err)
		}
		await.Until(t, 30*time.Second, "stored and marked success", func() bool {
			o, _, _ := r.st.OrderState(ctx, p, a.ID)
			return o.State == stock.StateSuccess
		})
		return a
	}
	publish := func(set stock.Settlement) {
		t.Helper()
		if err := r.pub.PublishAndAck(ctx, set.Event(), set.OutboxID); err != nil {
			t.Fatal(err)
		}
	}
	bought := func(st *stock.Store, user string) int64 {
		t.Helper()
		n, err := st.Bought(ctx, p, user)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	expired := buy("expired", 1, time.Second)
	cancelled := buy("cancelled", 1, time.Hour)
	paid := buy("paid", 2, time.Hour)
	mixStored := buy("mix", 1, time.Hour)
	// Deducted, never published (the edge died): their entries wait in the
	// outbox, where the snapshot keeps them.
	mixOutbox, code := r.deduct(p, "mix", 1, limit)
	if code != stock.OK {
		t.Fatalf("deduct mix: %v", code)
	}
	outboxed, code := r.deduct(p, "outboxed", 2, limit)
	if code != stock.OK {
		t.Fatalf("deduct outboxed: %v", code)
	}
	if err := srv.Save(); err != nil {
		t.Fatal(err)
	}

	// After the snapshot: expired by the sweep, two cancelled, one paid;
	// all published and stored.
	await.Until(t, 30*time.Second, "the deadline swept", func() bool {
		got, err := r.st.ExpireDue(ctx, p, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range got {
			if s.Info.ID != expired.ID {
				t.Fatalf("swept %+v", s)
			}
			publish(s)
		}
		return len(got) == 1
	})
	for _, a := range []stock.Attempt{cancelled, mixStored} {
		set, err := r.st.Cancel(ctx, p, a.ID)
		if err != nil || !set.Changed {
			t.Fatalf("Cancel %s = %+v, %v", a.UserID, set, err)
		}
		publish(set)
	}
	set, err := r.st.Pay(ctx, p, paid.ID, "evt_bc", time.Minute)
	if err != nil || set.Info.State != stock.StatePaid {
		t.Fatalf("Pay = %+v, %v", set, err)
	}
	publish(set)
	if err := r.drain(ctx); err != nil {
		t.Fatal(err)
	}
	for u, n := range map[string]int64{"expired": 0, "cancelled": 0, "mix": 1} {
		if got := bought(r.st, u); got != n {
			t.Fatalf("%s bought %d before the restart, want %d", u, got, n)
		}
	}

	// Redis restarts from the snapshot: every count holds its old units.
	r.stopConsumer()
	srv.Stop()
	srv.Start()
	st2 := open()
	r.useStock(st2)
	r.startConsumer()
	for u, n := range map[string]int64{"expired": 1, "cancelled": 1, "paid": 2, "mix": 2, "outboxed": 2} {
		if got := bought(st2, u); got != n {
			t.Fatalf("%s bought %d after the restart, want %d (the snapshot is not stale)", u, got, n)
		}
	}
	// The first purchase on the stale server fences the sale; the edge
	// rebuilds it.
	if c := r.code(p, "expired", 1, limit); c != stock.Recovering {
		t.Fatalf("a purchase on the stale server: %v", c)
	}
	if err := r.apply(); err != nil {
		t.Fatal(err)
	}
	await.NoError(t, 30*time.Second, "reopened", func() error {
		r.svc.Refresh(ctx, false)
		if info, ok, err := st2.SaleInfo(ctx, p); err != nil || !ok || info.Fence != "" {
			return fmt.Errorf("still closed: %+v %v %v", info, ok, err)
		}
		return nil
	})

	for u, n := range map[string]int64{"expired": 0, "cancelled": 0, "paid": 2, "mix": 1, "outboxed": 2} {
		if got := bought(st2, u); got != n {
			t.Errorf("%s bought %d after the rebuild, want %d", u, got, n)
		}
	}
	// Held: paid 2, mix's and outboxed's purchases in the outbox 1 + 2.
	if info := r.info(p); info.Remaining != 20-5 {
		t.Fatalf("rebuilt as %+v", info)
	}
	for _, c := range []struct {
		user string
		qty  int
		want stock.Code
	}{
		{"expired", limit, stock.OK},        // her only order expired
		{"cancelled", limit, stock.OK},      // hers was cancelled
		{"paid", 1, stock.LimitReached},     // she holds a paid order
		{"outboxed", 1, stock.LimitReached}, // her purchase is on its way
		{"mix", 2, stock.LimitReached},      // one cancelled, one on its way
		{"mix", 1, stock.OK},
	} {
		if got := r.code(p, c.user, c.qty, limit); got != c.want {
			t.Errorf("%s buying %d after the rebuild: %v, want %v", c.user, c.qty, got, c.want)
		}
	}
	if info := r.info(p); info.Remaining != 20-5-5 {
		t.Fatalf("after the purchases %+v", info)
	}
	// The outbox's purchases reach the store through the relay in
	// production; here the test sends them, then everything balances.
	r.publish(mixOutbox)
	r.publish(outboxed)
	r.reconcileClean(p)
}

// eachStoreKind runs test against both order stores.
func eachStoreKind(t *testing.T, test func(t *testing.T, kind string)) {
	for _, kind := range []string{"file", "clickhouse"} {
		t.Run(kind, func(t *testing.T) { test(t, kind) })
	}
}

// staleSnapshotSale is the three stale-snapshot tests' start: a restartable
// Redis (snapshotRedis), a rig on it and on an order store of kind whose
// consumer marks the orders, and one open sale p.
func staleSnapshotSale(t *testing.T, kind, p string, units int64, limit int) (*redistest.Server, func() *stock.Store, *rig) {
	t.Helper()
	srv, open := snapshotRedis(t)
	r := newRig(t, open(), openStoreKind(t, kind))
	r.mark = true
	r.startConsumer()
	r.acts = []*catalog.Sale{newActivity(p, units, limit)}
	if err := r.apply(); err != nil {
		t.Fatal(err)
	}
	return srv, open, r
}

// snapshotRedis is a redis-server that can be restarted from its last
// snapshot, and a way to open a Store on it (closed with the test). The
// budgets are long: these tests are about what a rebuild decides.
func snapshotRedis(t *testing.T) (*redistest.Server, func() *stock.Store) {
	srv := redistest.NewPersistent(t)
	return srv, func() *stock.Store {
		return stocktest.Open(t, srv.Addr())
	}
}
