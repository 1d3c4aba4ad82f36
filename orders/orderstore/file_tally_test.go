package orderstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"flashgate/orders/order"
)

// countTotals is Totals counted over every row, as the file store did
// before it kept a tally: the reference the tally is held to.
func countTotals(rows map[string]map[int64]Row, productID string) Totals {
	var t Totals
	users := map[string]int64{}
	for _, r := range rows[productID] {
		q := int64(r.Qty)
		switch {
		case r.Status == StatusUnpaid:
			t.UnpaidOrders++
			t.UnpaidUnits += q
			users[r.UserID] += q
		case r.Status == StatusPaid:
			t.PaidOrders++
			t.PaidUnits += q
			users[r.UserID] += q
		case r.Expired:
			t.ExpiredOrders++
			t.ExpiredUnits += q
		default:
			t.CancelledOrders++
			t.CancelledUnits += q
		}
	}
	for u, n := range users {
		if n > t.MaxUserUnits || n == t.MaxUserUnits && u < t.MaxUser {
			t.MaxUser, t.MaxUserUnits = u, n
		}
	}
	return t
}

// TestFileTotalsTally: orders, payments, cancels, expiries and
// redeliveries (older and equal versions too) in random order, in random
// batches; after every batch, and after a reopen, the kept tally is what
// counting every row gives — the first user included, as it loses units
// and ties.
func TestFileTotalsTally(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	rng := rand.New(rand.NewPCG(3, 17))
	const base = 1796038487397
	products := []string{"p1", "p2"}
	check := func(when string) {
		t.Helper()
		for _, p := range products {
			got, err := s.Totals(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			s.mu.Lock()
			want := countTotals(s.rows, p)
			s.mu.Unlock()
			if got != want {
				t.Fatalf("%s: totals %s\n got %+v\nwant %+v", when, p, got, want)
			}
		}
	}
	for batch := range 300 {
		var rows []Row
		for range 1 + rng.IntN(8) {
			id := int64(1 + rng.IntN(200))
			r := Row{Status: StatusUnpaid, UpdatedMs: base + id, Order: order.Order{
				ID: id, ProductID: products[id%2], UserID: fmt.Sprintf("u%d", rng.IntN(6)), Qty: 1 + int(id%3),
				PriceCents: 9900, CreatedMs: base + id, Edge: 1,
			}}
			// One user per order id, as in a sale: a later row of an order
			// is the same order.
			r.UserID = fmt.Sprintf("u%d", id%7)
			switch rng.IntN(5) {
			case 1:
				r.Status, r.PaidMs, r.UpdatedMs = StatusPaid, base+id+5, base+id+5+int64(rng.IntN(3))
			case 2:
				r.Status, r.UpdatedMs = StatusCancelled, base+id+5+int64(rng.IntN(3))
			case 3:
				r.Status, r.Expired, r.UpdatedMs = StatusCancelled, true, base+id+5+int64(rng.IntN(3))
			}
			rows = append(rows, r)
		}
		if err := s.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("after batch %d", batch))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = OpenFile(dir); err != nil {
		t.Fatal(err)
	}
	check("after reopening")
	if got, _ := s.Totals(ctx, "none"); got != (Totals{}) {
		t.Errorf("totals of a product without orders: %+v", got)
	}
}

// BenchmarkFileTotals: one Totals call on a product of 200,000 orders,
// kept tally against counting every row (countTotals, what it replaced).
func BenchmarkFileTotals(b *testing.B) {
	s, err := OpenFile(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rows := make([]Row, 0, 1000)
	for id := int64(1); id <= 200_000; id++ {
		rows = append(rows, Row{Status: StatusUnpaid, UpdatedMs: id, Order: order.Order{
			ID: id, ProductID: "p1", UserID: fmt.Sprintf("u%d", id), Qty: 1, PriceCents: 9900, CreatedMs: id, Edge: 1,
		}})
		if len(rows) == cap(rows) {
			if err := s.Insert(context.Background(), rows); err != nil {
				b.Fatal(err)
			}
			rows = rows[:0]
		}
	}
	b.Run("tally", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Totals(context.Background(), "p1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("count-all", func(b *testing.B) {
		for b.Loop() {
			countTotals(s.rows, "p1")
		}
	})
}
