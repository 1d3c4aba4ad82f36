package orderstore

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"flashgate/orders/order"
)

func ledgerRow(id int64, u string, qty int, status uint8) Row {
	ms := time.Now().UnixMilli()
	return Row{Status: status, UpdatedMs: ms + int64(status), Order: order.Order{
		ID: id, ProductID: "lp", UserID: u, Qty: qty, PriceCents: 100, CreatedMs: ms,
	}}
}

func TestLedgerRebuild(t *testing.T) {
	ctx := context.Background()
	fs, err := OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if err := fs.Insert(ctx, []Row{ledgerRow(1, "a", 2, StatusUnpaid), ledgerRow(2, "b", 1, StatusUnpaid),
		ledgerRow(3, "b", 3, StatusCancelled)}); err != nil {
		t.Fatal(err)
	}

	t.Run("ReadsAfterDrain", func(t *testing.T) {
		var drained atomic.Int32
		l := Ledger{Store: fs, Drain: func(context.Context) error {
			// An event that was in Kafka lands before the drain returns.
			if drained.Add(1) == 1 {
				return fs.Insert(ctx, []Row{ledgerRow(4, "c", 1, StatusUnpaid)})
			}
			return nil
		}}
		st, err := l.Rebuild(ctx, "lp", []int64{4, 5})
		if err != nil {
			t.Fatal(err)
		}
		want := LedgerState{Sold: 4, Released: 3, Orders: 3, Buyers: map[string]int64{"a": 2, "b": 1, "c": 1},
			Statuses: map[int64]OrderStatus{4: {Status: StatusUnpaid}}, Deadlines: []Row{}}
		if !reflect.DeepEqual(st, want) {
			t.Fatalf("state\n got %+v\nwant %+v", st, want)
		}
	})

	t.Run("PaidExpiredAndDeadlines", func(t *testing.T) {
		ms := time.Now().UnixMilli()
		due := ledgerRow(6, "d", 1, StatusUnpaid)
		due.PayByMs = due.CreatedMs + 60_000
		paid := ledgerRow(7, "e", 2, StatusPaid)
		paid.PaidMs, paid.PayByMs = ms, paid.CreatedMs+60_000
		expired := ledgerRow(8, "f", 1, StatusCancelled)
		expired.Expired, expired.PayByMs = true, expired.CreatedMs+1
		if err := fs.Insert(ctx, []Row{due, paid, expired}); err != nil {
			t.Fatal(err)
		}
		st, err := Ledger{Store: fs}.Rebuild(ctx, "lp", []int64{6, 7, 8})
		if err != nil {
			t.Fatal(err)
		}
		// Held: a 2, b 1, c 1 (above), d 1 unpaid, e 2 paid.
		if st.Sold != 7 || st.Paid != 2 || st.Released != 4 || st.Expired != 1 || st.Orders != 5 || st.Buyers["e"] != 2 || st.Buyers["f"] != 0 {
			t.Errorf("state %+v", st)
		}
		if len(st.Deadlines) != 1 || st.Deadlines[0].ID != 6 || st.Deadlines[0].PayByMs != due.PayByMs {
			t.Errorf("deadlines %+v, want order 6's", st.Deadlines)
		}
		want := map[int64]OrderStatus{6: {Status: StatusUnpaid, PayByMs: due.PayByMs}, 7: {Status: StatusPaid, PayByMs: paid.PayByMs, PaidMs: ms},
			8: {Status: StatusCancelled, Expired: true, PayByMs: expired.PayByMs}}
		if !reflect.DeepEqual(st.Statuses, want) {
			t.Errorf("statuses %+v, want %+v", st.Statuses, want)
		}
	})

	t.Run("NotDrainedFails", func(t *testing.T) {
		boom := errors.New("lag 3")
		l := Ledger{Store: fs, Drain: func(context.Context) error { return boom }}
		if _, err := l.Rebuild(ctx, "lp", nil); !errors.Is(err, boom) {
			t.Fatalf("err %v", err)
		}
	})

	t.Run("MovingLedgerIsReadAgain", func(t *testing.T) {
		// An outbox relay stores an asked-for order in the middle of the
		// read: the counts and the statuses must agree.
		m := &movingStore{Store: fs, id: 6}
		st, err := Ledger{Store: m}.Rebuild(ctx, "lp", []int64{6})
		if err != nil {
			t.Fatal(err)
		}
		if m.reads.Load() < 2 {
			t.Fatal("the read was not repeated")
		}
		if st.Statuses[6].Status != StatusUnpaid || st.Buyers["m"] != 1 {
			t.Fatalf("order 6 stored but not counted consistently: %+v", st)
		}
	})
}

// movingStore stores order id during the first Buyers call.
type movingStore struct {
	Store
	id    int64
	reads atomic.Int32
}

func (m *movingStore) Buyers(ctx context.Context, p string) (map[string]int64, error) {
	if m.reads.Add(1) == 1 {
		b, err := m.Store.Buyers(ctx, p)
		if err != nil {
			return nil, err
		}
		return b, m.Store.Insert(ctx, []Row{ledgerRow(m.id, "m", 1, StatusUnpaid)})
	}
	return m.Store.Buyers(ctx, p)
}

func TestLedgerRebuildWithTail(t *testing.T) {
	ctx := context.Background()
	fs, err := OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if err := fs.Insert(ctx, []Row{ledgerRow(1, "a", 2, StatusUnpaid)}); err != nil {
		t.Fatal(err)
	}
	ev := func(id int64) order.Event {
		return order.Event{V: 1, Type: order.TypeOrder, Order: ledgerRow(id, "t", 1, StatusUnpaid).Order}
	}
	tail := []order.Event{ev(1), ev(2), ev(3), ev(2)} // 1 stored already, 2 twice

	t.Run("TailInsteadOfDrain", func(t *testing.T) {
		drains := 0
		l := Ledger{Store: fs, Tail: func(context.Context, string) ([]order.Event, error) { return tail, nil },
			Drain: func(context.Context) error { drains++; return errors.New("a dead member's partitions") }}
		st, err := l.Rebuild(ctx, "lp", []int64{9})
		if err != nil {
			t.Fatal(err)
		}
		if drains != 0 || !st.TailRead || !reflect.DeepEqual(st.Tail, tail) {
			t.Fatalf("drains %d, tail read %v: %+v", drains, st.TailRead, st.Tail)
		}
		// The tail's orders are asked: 1 is stored, 2 and 3 are not.
		if want := map[int64]OrderStatus{1: {Status: StatusUnpaid}}; !reflect.DeepEqual(st.Statuses, want) || st.Sold != 2 {
			t.Fatalf("statuses %+v sold %d, want %+v and 2", st.Statuses, st.Sold, want)
		}
	})

	t.Run("UnreadableTailDrains", func(t *testing.T) {
		drains := 0
		l := Ledger{Store: fs, Tail: func(context.Context, string) ([]order.Event, error) { return nil, errors.New("no broker") },
			Drain: func(context.Context) error { drains++; return nil }}
		st, err := l.Rebuild(ctx, "lp", nil)
		if err != nil || drains == 0 || st.TailRead || st.Tail != nil {
			t.Fatalf("err %v, drains %d, tail read %v", err, drains, st.TailRead)
		}
		l.Drain = func(context.Context) error { return errors.New("lag 3") }
		if _, err := l.Rebuild(ctx, "lp", nil); err == nil || !strings.Contains(err.Error(), "no broker") || !strings.Contains(err.Error(), "lag 3") {
			t.Fatalf("neither tail nor drain: %v", err)
		}
	})

	t.Run("StoredDuringTheReadIsReadAgain", func(t *testing.T) {
		// The consumer stores a tail order in the middle of the read: its
		// status and the counts must agree.
		m := &movingStore{Store: fs, id: 3}
		l := Ledger{Store: m, Tail: func(context.Context, string) ([]order.Event, error) { return tail, nil }}
		st, err := l.Rebuild(ctx, "lp", nil)
		if err != nil {
			t.Fatal(err)
		}
		if m.reads.Load() < 2 || !st.TailRead {
			t.Fatalf("the read was not repeated (%d), tail read %v", m.reads.Load(), st.TailRead)
		}
		if st.Statuses[3].Status != StatusUnpaid || st.Buyers["m"] != 1 {
			t.Fatalf("order 3 stored but not counted consistently: %+v", st)
		}
	})

	t.Run("KeptMovingDrains", func(t *testing.T) {
		drains := 0
		l := Ledger{Store: &alwaysMoving{Store: fs}, Tail: func(context.Context, string) ([]order.Event, error) { return tail, nil },
			Drain: func(context.Context) error { drains++; return nil }}
		if _, err := l.Rebuild(ctx, "lp", nil); err == nil || drains == 0 {
			// (alwaysMoving never settles, so the drained reads fail too.)
			t.Fatalf("err %v, drains %d", err, drains)
		}
	})
}

// alwaysMoving stores a new order of the product at every Buyers call.
type alwaysMoving struct {
	Store
	id atomic.Int64
}

func (m *alwaysMoving) Buyers(ctx context.Context, p string) (map[string]int64, error) {
	b, err := m.Store.Buyers(ctx, p)
	if err != nil {
		return nil, err
	}
	return b, m.Store.Insert(ctx, []Row{ledgerRow(1000+m.id.Add(1), "z", 1, StatusUnpaid)})
}
