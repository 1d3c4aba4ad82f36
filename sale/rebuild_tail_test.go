package sale_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"flashgate/internal/await"
	"flashgate/internal/redistest"
	"flashgate/orders/broker"
	"flashgate/orders/consumer"
	"flashgate/orders/order"
	"flashgate/orders/orderstore"
	"flashgate/orders/stock"
	"flashgate/sale"
	"flashgate/sale/catalog"
)

// useTail gives the rig's edge a ledger that reads the topic's
// uncommitted tail (as proxy/wire.go's does), with the drain behind it.
func (r *rig) useTail() {
	r.svc = sale.New(sale.Deps{Store: r.st, Sales: catalog.NewRegistry(), Log: discard,
		Ledger: orderstore.Ledger{Store: r.store, Drain: r.drain, Tail: r.tail}})
}

func (r *rig) tail(ctx context.Context, productID string) ([]order.Event, error) {
	return consumer.Tail(ctx, r.brokers, broker.Security{}, edge.Kafka.Topic, edge.Orders.Group, productID)
}

func (r *rig) lag() int64 {
	r.t.Helper()
	n, err := consumer.GroupLag(context.Background(), r.brokers, broker.Security{}, edge.Kafka.Topic, edge.Orders.Group)
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

// TestRebuildReadsUncommittedTail (issue 27 finding 3, "the drain"): the
// consumer group is down — its member gone with events not committed, one
// of them already stored (killed between the insert and the commit) — when
// Redis restarts empty. The rebuild must not wait for the group to drain:
// it reads the topic's uncommitted tail itself and reopens the sale within
// the 3 s goal, with exactly what is left and every buyer's count, each
// order counted once (stored and in the tail, twice in the tail, a release
// in the tail of a stored order), while the group has still not drained.
// The tail's orders are pending in Redis; when the consumer comes back it
// stores them exactly once and marks them success (a deadline into the due
// set), and reconcile is clean. Before, the rebuild waited in the drain
// until its budget ran out and the sale stayed closed for as long as the
// group had not drained.
func TestRebuildReadsUncommittedTail(t *testing.T) {
	for _, kind := range []string{"file", "clickhouse"} {
		t.Run(kind, func(t *testing.T) { testRebuildReadsTail(t, kind) })
	}
}

func testRebuildReadsTail(t *testing.T, kind string) {
	ctx := context.Background()
	const p, initial, limit = "tp", 40, 3
	srv := redistest.New(t)
	r := newRig(t, openRedisStore(t, srv.Addr()), openStoreKind(t, kind))
	r.mark = true
	r.useTail()
	r.startConsumer()
	r.acts = []*catalog.Sale{newActivity(p, initial, limit)}
	if err := r.apply(); err != nil {
		t.Fatal(err)
	}
	var held int64
	// Stored and committed: s0..s3 one unit each, s4 two.
	for i := range 4 {
		if c := r.code(p, "s"+strconv.Itoa(i), 1, limit); c != stock.OK {
			t.Fatal(c)
		}
		held++
	}
	rel, _ := r.buy(p, "s4", 2, limit)
	held += 2
	if err := r.drain(ctx); err != nil {
		t.Fatal(err)
	}

	// The group's only member leaves; what follows is the tail.
	r.stopConsumer()
	r.release(rel) // a release of a stored order, in the tail
	held -= 2
	tailOrders := map[int64]stock.Attempt{}
	for i := range 3 {
		a, c := r.buy(p, "t"+strconv.Itoa(i), 2, limit)
		if c != stock.OK {
			t.Fatal(c)
		}
		tailOrders[a.ID] = a
		held += 2
	}
	// With a pay deadline: the consumer's mark puts it in the due set.
	due := newAttempt(p, "t3", 1, limit)
	due.PayByMs = due.CreatedMs + time.Hour.Milliseconds()
	if out, err := r.st.Deduct(ctx, due); err != nil || out.Code != stock.OK {
		t.Fatal(out, err)
	} else {
		due.TokenNonceHex = out.OutboxID
	}
	r.publish(due)
	tailOrders[due.ID] = due
	held++
	// Twice in the tail: a producer's retry.
	dup, _ := r.buy(p, "t4", 1, limit)
	if err := r.pub.Publish(ctx, broker.OrderEvent(&dup.Order)); err != nil {
		t.Fatal(err)
	}
	tailOrders[dup.ID] = dup
	held++
	// In the tail and stored: a consumer killed after its insert, before
	// its commit.
	stored, _ := r.buy(p, "t5", 1, limit)
	if err := r.store.Insert(ctx, []orderstore.Row{orderstore.FromEvent(new(broker.OrderEvent(&stored.Order)))}); err != nil {
		t.Fatal(err)
	}
	held++
	if lag := r.lag(); lag < 8 {
		t.Fatalf("lag %d before the loss, want the tail's 8 events", lag)
	}

	// Redis loses its memory. The first refresh on the empty server fences
	// the sale and starts its recovery (which may reopen it before the next
	// poll sees the fence: the rebuild count says it was rebuilt).
	srv.Restart()
	restarted := time.Now()
	// The goal: reopened within 3 s of a healed fault. Awaited longer, to
	// report how long it took.
	await.NoError(t, 20*time.Second, "rebuilt and reopened without the drain", func() error {
		r.svc.Refresh(ctx, false) // the client may be reconnecting
		info, ok, err := r.st.SaleInfo(ctx, p)
		if _, rebuilds := r.svc.Recovering(p); rebuilds == 0 || err != nil || !ok || info.Fence != "" {
			return fmt.Errorf("not rebuilt (%d rebuilds): %+v %v %v", rebuilds, info, ok, err)
		}
		return nil
	})
	took := time.Since(restarted)
	t.Logf("reopened %v after Redis restarted, the group's lag %d", took.Round(time.Millisecond), r.lag())
	if took > 3*time.Second {
		t.Errorf("reopened %v after Redis restarted, want within 3s", took.Round(time.Millisecond))
	}
	if lag := r.lag(); lag == 0 {
		t.Fatal("the group drained: the test proves nothing")
	}

	info := r.info(p)
	if info.Remaining != initial-held || info.Initial != initial || info.Released != 2 {
		t.Fatalf("rebuilt as %+v, want remaining %d of %d, released 2", info, initial-held, initial)
	}
	for u, want := range map[string]int64{"s0": 1, "s4": 0, "t0": 2, "t2": 2, "t3": 1, "t4": 1, "t5": 1} {
		if n, err := r.st.Bought(ctx, p, u); err != nil || n != want {
			t.Errorf("%s: bought %d %v, want %d", u, n, err, want)
		}
	}
	// The tail's orders are pending until the consumer stores them.
	for id, a := range tailOrders {
		if o, ok, _ := r.st.OrderState(ctx, p, id); !ok || o.State != stock.StatePending || o.UserID != a.UserID || o.Qty != a.Qty {
			t.Errorf("tail order %d (%s): %+v %v, want pending", id, a.UserID, o, ok)
		}
	}
	if c := r.code(p, "t0", 2, limit); c != stock.LimitReached {
		t.Errorf("t0 over her limit after the rebuild: %v", c)
	}
	if c := r.code(p, "s4", 3, limit); c != stock.OK { // her release came back
		t.Errorf("s4 after her release: %v", c)
	}
	held += 3

	// The consumer comes back: everything stored once, the tail's orders
	// marked success, the deadline in the due set.
	r.startConsumer()
	await.Until(t, 30*time.Second, "the tail's orders stored and marked success", func() bool {
		for id := range tailOrders {
			if o, _, _ := r.st.OrderState(ctx, p, id); o.State != stock.StateSuccess {
				return false
			}
		}
		return true
	})
	ds, err := r.st.DueOrders(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].OrderID != due.ID {
		t.Errorf("due set %+v, want t3's order %d", ds, due.ID)
	}
	sold := r.sellOut(p, 60, limit)
	if held+sold != initial {
		t.Fatalf("held %d + sold after the rebuild %d != %d", held, sold, initial)
	}
	if err := r.drain(ctx); err != nil {
		t.Fatal(err)
	}
	tot, err := r.store.Totals(ctx, p)
	if err != nil || tot.HeldUnits() != initial || tot.MaxUserUnits > limit {
		t.Fatalf("ledger %+v %v", tot, err)
	}
	r.reconcileClean(p)
}

// storingLedger is the edge's ledger with a consumer that stores one of
// the tail's orders right after the ledger was read, before the rebuild
// writes it: the consumer's success mark then finds no order (Redis lost
// it) and marks nothing.
type storingLedger struct {
	orderstore.Ledger
	store func(st orderstore.LedgerState)
}

func (l storingLedger) Rebuild(ctx context.Context, p string, ids []int64) (orderstore.LedgerState, error) {
	st, err := l.Ledger.Rebuild(ctx, p, ids)
	if err == nil {
		l.store(st)
	}
	return st, err
}

// A tail order the consumer stores while the rebuild writes is marked
// success by the rebuild (markStoredTail): written pending after the
// consumer's mark, it would read pending for good.
func TestRebuildMarksTailOrdersStoredMeanwhile(t *testing.T) {
	ctx := context.Background()
	const p, limit = "tm", 2
	srv := redistest.New(t)
	r := newRig(t, openRedisStore(t, srv.Addr()), openStoreKind(t, "file"))
	r.acts = []*catalog.Sale{newActivity(p, 10, limit)}
	if err := r.apply(); err != nil {
		t.Fatal(err)
	}
	a, _ := r.buy(p, "a", 1, limit) // no consumer: both in the tail
	b, _ := r.buy(p, "b", 2, limit)
	var stored atomic.Bool
	r.svc = sale.New(sale.Deps{Store: r.st, Sales: catalog.NewRegistry(), Log: discard,
		Ledger: storingLedger{Ledger: orderstore.Ledger{Store: r.store, Drain: r.drain, Tail: r.tail},
			store: func(st orderstore.LedgerState) {
				if len(st.Tail) != 2 || stored.Swap(true) {
					return
				}
				if err := r.store.Insert(ctx, []orderstore.Row{orderstore.FromEvent(new(broker.OrderEvent(&a.Order)))}); err != nil {
					t.Error(err)
				}
			}}})
	if err := r.apply(); err != nil {
		t.Fatal(err)
	}

	srv.Restart()
	await.NoError(t, 20*time.Second, "rebuilt", func() error {
		r.svc.Refresh(ctx, false)
		info, ok, err := r.st.SaleInfo(ctx, p)
		if _, rebuilds := r.svc.Recovering(p); rebuilds == 0 || err != nil || !ok || info.Fence != "" {
			return fmt.Errorf("not rebuilt (%d rebuilds): %+v %v %v", rebuilds, info, ok, err)
		}
		return nil
	})
	if !stored.Load() {
		t.Fatal("the ledger's reader never saw the tail")
	}
	if info := r.info(p); info.Remaining != 7 {
		t.Fatalf("remaining %d, want 7", info.Remaining)
	}
	for id, want := range map[int64]string{a.ID: stock.StateSuccess, b.ID: stock.StatePending} {
		if o, ok, _ := r.st.OrderState(ctx, p, id); !ok || o.State != want {
			t.Errorf("order %d: %+v %v, want %s", id, o, ok, want)
		}
	}
}
