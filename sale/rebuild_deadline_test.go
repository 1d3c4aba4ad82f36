package sale_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/orders/order"
	"flashgate/orders/stock"
	"flashgate/sale/activity"
)

// Redis comes back from a snapshot taken while deadlines were pending: since
// the snapshot one order was paid, one cancelled, one expired by the sweep
// (all stored), one bought (its hash and deadline lost) and one expired
// whose release event is still in the outbox only. The rebuild gives every
// order the ledger's state, puts the unpaid orders' deadlines back (an
// overdue one too, which the first sweep then releases), and the sale
// reconciles: nothing paid or released twice, nothing held by nobody.
func TestStaleSnapshotRebuildsDeadlines(t *testing.T) {
	for _, kind := range []string{"file", "clickhouse"} {
		t.Run(kind, func(t *testing.T) { testStaleSnapshotDeadlines(t, kind) })
	}
}

func testStaleSnapshotDeadlines(t *testing.T, kind string) {
	ctx := context.Background()
	srv := redistest.NewPersistent(t)
	open := func() *stock.Store {
		st, err := stock.Open(ctx, srv.Addr(), stock.Options{
			Timeout: 10 * time.Second, QueueTimeout: 10 * time.Second, OrderTTL: edge.Sale.OrderTTL,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	st := open()
	r := newRig(t, st, openStoreKind(t, kind))
	r.mark = true
	r.startConsumer()
	const p, limit = "dl", 1
	r.acts = []*activity.Activity{newActivity(p, 20, limit)}
	if err := r.apply(); err != nil {
		t.Fatal(err)
	}
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
	// A count the old server holds above the ledger's is kept (the rebuild
	// only raises counts): swept, released after the snapshot, stays at
	// its limit in this sale. Its unit is back all the same.
	if c := r.code(p, "swept", 1, limit); c != stock.LimitReached {
		t.Errorf("swept buying again after its expiry: %v", c)
	}
	sold := r.sellOut(p, 30, limit)
	if sold != 20-4+1 {
		t.Errorf("sold %d after the rebuild, want %d", sold, 20-4+1)
	}
	// unsent's release reaches the store through the relay in production;
	// here the test sends it, then everything balances.
	if err := r.pub.Publish(ctx, unsentEvent); err != nil {
		t.Fatal(err)
	}
	r.reconcileClean(p)
}
